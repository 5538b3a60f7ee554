package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// replicaPair returns two stores under one fresh key prefix: two processes of one deployment.
func replicaPair(t *testing.T) (a, b *Store) {
	t.Helper()
	prefix := "prontotest:" + uuidv7.New() + ":"
	return storeWithPrefix(t, prefix), storeWithPrefix(t, prefix)
}

func claimOne(t *testing.T, s *Store, queue string) *store.Job {
	t.Helper()
	jobs, err := s.Claim(context.Background(), store.ClaimParams{Queue: queue, Limit: 1, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

func completion(j *store.Job) store.Completion {
	return store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
}

// TestReusedIDInAnotherQueue: a process that once claimed a job finishes and heartbeats the job
// that took its id in another queue after the first one went through another process: what it
// remembers of the first job's queue does not hide the second.
func TestReusedIDInAnotherQueue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		gone func(t *testing.T, s *Store, j *store.Job) // the first job goes, through s
	}{
		{"completed then deleted", func(t *testing.T, s *Store, j *store.Job) {
			res, err := s.Finish(context.Background(), []store.Completion{completion(j)})
			require.NoError(t, err)
			require.True(t, res[0].Applied)
			_, err = s.DeleteJob(context.Background(), j.ID)
			require.NoError(t, err)
		}},
		{"removed as it completed", func(t *testing.T, s *Store, j *store.Job) {
			c := completion(j)
			c.Remove = true
			res, err := s.Finish(context.Background(), []store.Completion{c})
			require.NoError(t, err)
			require.True(t, res[0].Applied)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			a, b := replicaPair(t)
			first := testJob("reuse-1")
			_, err := a.Insert(ctx, []*store.InsertParams{first})
			require.NoError(t, err)
			held := claimOne(t, b, "reuse-1") // b remembers the job's queue
			tc.gone(t, a, held)
			_, err = b.GetJob(ctx, first.ID)
			require.ErrorIs(t, err, store.ErrNotFound)

			second := testJob("reuse-2")
			second.ID = first.ID
			_, err = a.Insert(ctx, []*store.InsertParams{second})
			require.NoError(t, err)
			j := claimOne(t, a, "reuse-2")

			lost, err := b.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w", LeaseDuration: time.Hour,
				IDs: []string{j.ID}, Tokens: []string{j.ClaimToken}})
			require.NoError(t, err)
			require.Empty(t, lost, "the job is held, in its new queue")
			res, err := b.Finish(ctx, []store.Completion{completion(j)})
			require.NoError(t, err)
			require.True(t, res[0].Applied, "the outcome is written to the job of the new queue")
			got, err := a.GetJob(ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, got.State)
			require.Equal(t, "reuse-2", got.Queue)
		})
	}
}

// TestStaleClaimNotApplied: an outcome or heartbeat for a job this process claimed that is no
// longer held (finished through another process) is refused, and the refusal is not retried
// anywhere: the id index names the same queue.
func TestStaleClaimNotApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := replicaPair(t)
	_, err := a.Insert(ctx, []*store.InsertParams{testJob("stale")})
	require.NoError(t, err)
	j := claimOne(t, b, "stale")
	res, err := a.Finish(ctx, []store.Completion{completion(j)})
	require.NoError(t, err)
	require.True(t, res[0].Applied)

	lost, err := b.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w", LeaseDuration: time.Hour,
		IDs: []string{j.ID}, Tokens: []string{j.ClaimToken}})
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, lost)
	c := completion(j)
	c.State = store.StateDiscarded
	res, err = b.Finish(ctx, []store.Completion{c})
	require.NoError(t, err)
	require.False(t, res[0].Applied)
	got, err := b.GetJob(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, got.State)
}

// TestClaimedJobFinishesWithoutIndex: the outcome of a job this process claimed goes straight to
// its queue (no id index lookup on that path): it is applied even when the index lost the id.
func TestClaimedJobFinishesWithoutIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("hot")})
	require.NoError(t, err)
	j := claimOne(t, s, "hot")
	require.NoError(t, s.rdb.HDel(ctx, s.idsKey(), j.ID).Err())
	res, err := s.Finish(ctx, []store.Completion{completion(j)})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
}

// TestClaimCacheBounded: the queues a process remembers of the jobs it claimed stay bounded when
// other processes finish those jobs (it never hears of them), and jobs whose entry went still
// finish and heartbeat through it.
func TestClaimCacheBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := replicaPair(t)
	a.claims.size = 4
	params := make([]*store.InsertParams, 50)
	for i := range params {
		params[i] = testJob("bound")
	}
	_, err := a.Insert(ctx, params)
	require.NoError(t, err)
	var jobs []*store.Job
	for len(jobs) < len(params) {
		got, err := a.Claim(ctx, store.ClaimParams{Queue: "bound", Limit: 3, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.NotEmpty(t, got)
		jobs = append(jobs, got...)
	}
	require.LessOrEqual(t, a.claims.len(), 2*a.claims.size)

	// The oldest jobs' entries are gone: they go by the id index.
	early, late := jobs[:5], jobs[5:]
	lost, err := a.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w", LeaseDuration: time.Hour, IDs: jobIDs(early)})
	require.NoError(t, err)
	require.Empty(t, lost)
	cs := make([]store.Completion, len(early))
	for i, j := range early {
		cs[i] = completion(j)
	}
	res, err := a.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}

	cs = make([]store.Completion, len(late))
	for i, j := range late {
		cs[i] = completion(j)
	}
	res, err = b.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}
	require.LessOrEqual(t, a.claims.len(), 2*a.claims.size)
}
