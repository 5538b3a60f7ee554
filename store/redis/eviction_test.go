package redis

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// The tests below delete a job's hash behind the store's back, standing in for an allkeys-*
// maxmemory policy evicting it: the queue's other jobs keep running, and no result names a job it
// cannot describe.

// evictedStore returns a store on a private Redis with jobs ps inserted into queue "ev", and the
// hash of the last one deleted behind the store's back, as an allkeys-* policy evicting it would.
func evictedStore(t *testing.T, ps ...*store.InsertParams) (*Store, *goredis.Client) {
	t.Helper()
	ctx := context.Background()
	s, rdb := privateStore(t)
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	gone := ps[len(ps)-1]
	j, err := s.GetJob(ctx, gone.ID)
	require.NoError(t, err)
	require.Equal(t, gone.State, j.State)
	require.NoError(t, rdb.Del(ctx, s.jobKey("ev", gone.ID)).Err())
	return s, rdb
}

// requireDropped runs pass until queue "ev"'s index (its key suffix) no longer names the evicted
// job id, checking each pass's jobs, and then requires that no hash was written for the job.
func requireDropped(t *testing.T, s *Store, rdb *goredis.Client, id, index string, pass func(c *assert.CollectT) []*store.Job) {
	t.Helper()
	ctx := context.Background()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, j := range pass(c) {
			require.NotNil(c, j, "a result holds a nil job")
		}
		err := rdb.ZScore(ctx, s.qkey("ev")+index, id).Err()
		require.ErrorIs(c, err, goredis.Nil, "the evicted job left the %s index", index)
	}, 10*time.Second, 5*time.Millisecond)
	requireNoHash(t, s, rdb, id)
}

// requireNoHash requires that no hash was written for the evicted job id of queue "ev".
func requireNoHash(t *testing.T, s *Store, rdb *goredis.Client, id string) {
	t.Helper()
	n, err := rdb.Exists(context.Background(), s.jobKey("ev", id)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no hash is written for the evicted job")
}

// TestEvictedScheduledJobLeavesQueueClaimable: a due scheduled job whose hash is gone is dropped by
// the claim's promotion and by Promote, which then go on with the queue's other jobs.
func TestEvictedScheduledJobLeavesQueueClaimable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, promote := range []bool{false, true} {
		ready := testJob("ev")
		gone := testJob("ev")
		gone.State = store.StateScheduled
		gone.ScheduledAt = time.Now().Add(-time.Minute) // due
		s, rdb := evictedStore(t, ready, gone)

		if promote {
			n, err := s.Promote(ctx, 100)
			require.NoError(t, err)
			require.Zero(t, n, "nothing left to promote")
		}
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "ev", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, ready.ID, jobs[0].ID)
		sched, err := rdb.ZCard(ctx, s.qkey("ev")+"sched").Result()
		require.NoError(t, err)
		require.Zero(t, sched, "the evicted job left the due index")
		requireNoHash(t, s, rdb, gone.ID)
	}
}

// TestEvictedActiveJobRescue: an active job whose hash is gone is dropped from the lease index by
// the rescue, which reports no job for it and writes no hash.
func TestEvictedActiveJobRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testJob("ev")
	s, rdb := privateStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "ev", Limit: 1, WorkerID: "w", LeaseDuration: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, rdb.Del(ctx, s.jobKey("ev", p.ID)).Err())

	requireDropped(t, s, rdb, p.ID, "lease", func(c *assert.CollectT) []*store.Job {
		res, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
		require.NoError(c, err)
		return append(res.Requeued, res.Discarded...)
	})
}

// TestEvictedExpiringJob: a not-started job with an expiry whose hash is gone is dropped from the
// expiry index by DiscardExpired, which reports no job for it and writes no hash.
func TestEvictedExpiringJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testJob("ev")
	p.State = store.StateScheduled
	p.ScheduledAt = time.Now().Add(time.Hour)
	p.ExpiresAt = time.Now().Add(10 * time.Millisecond)
	s, rdb := evictedStore(t, p)

	requireDropped(t, s, rdb, p.ID, "exp", func(c *assert.CollectT) []*store.Job {
		jobs, err := s.DiscardExpired(ctx, 100)
		require.NoError(c, err)
		return jobs
	})
}

// TestEvictionPolicyWarned: a server whose maxmemory-policy evicts keys is reported by
// CheckEvictionPolicy and warned about through the store's logger when the store starts; the
// default, noeviction, is not.
func TestEvictionPolicyWarned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		policy string
		warned bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"volatile-ttl", true},
	} {
		srv := redistest.StartServer(t, "--appendonly", "no", "--maxmemory-policy", tc.policy)
		rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		var logs bytes.Buffer
		s, err := New(ctx, rdb, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		err = s.CheckEvictionPolicy(ctx)
		if !tc.warned {
			require.NoError(t, err)
			require.NotContains(t, logs.String(), "maxmemory-policy")
			continue
		}
		require.ErrorIs(t, err, ErrEvictionPolicy)
		require.ErrorContains(t, err, tc.policy)
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), tc.policy)
	}
}
