package memory_test

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// insertAvailable stores n available jobs in queue q and returns their ids in insertion order.
func insertAvailable(t *testing.T, s *memory.Store, q string, n int) []string {
	t.Helper()
	var ps []*store.InsertParams
	var ids []string
	for range n {
		p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: q, Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1}
		ps = append(ps, p)
		ids = append(ids, p.ID)
	}
	_, err := s.Insert(t.Context(), ps)
	require.NoError(t, err)
	return ids
}

// finishOneByOne claims and finishes the jobs of queue q one at a time, each in state st.
func finishOneByOne(t *testing.T, s *memory.Store, q string, n int, st store.State) {
	t.Helper()
	for range n {
		jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		res, err := s.Finish(t.Context(), []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: st}})
		require.NoError(t, err)
		require.True(t, res[0].Applied)
	}
}

func countStates(t *testing.T, s *memory.Store) map[store.State]int64 {
	t.Helper()
	qs, err := s.ListQueues(t.Context())
	require.NoError(t, err)
	out := map[store.State]int64{}
	for _, q := range qs {
		for st, n := range q.Counts {
			out[st] += n
		}
	}
	return out
}

// TestMaxFinishedKeepsNewest: with a bound of 5, finishing 12 jobs (completed, discarded and
// cancelled, interleaved) keeps the 5 that finished last, whatever their state, and never touches a
// job that has not finished.
func TestMaxFinishedKeepsNewest(t *testing.T) {
	s := memory.New(memory.WithMaxFinished(5))
	ctx := t.Context()
	ids := insertAvailable(t, s, "q", 12)
	waiting := insertAvailable(t, s, "idle", 20) // never claimed: must all survive
	var order []string
	states := []store.State{store.StateCompleted, store.StateDiscarded, store.StateCancelled}
	for i := range ids {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		st := states[i%3]
		if st == store.StateCancelled {
			_, err = s.CancelJob(ctx, jobs[0].ID)
		} else {
			_, err = s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: st}})
		}
		require.NoError(t, err)
		order = append(order, jobs[0].ID)
	}
	for i, id := range order {
		_, err := s.GetJob(ctx, id)
		if i < len(order)-5 {
			require.ErrorIs(t, err, store.ErrNotFound, "finished job %d of %d was dropped", i+1, len(order))
		} else {
			require.NoError(t, err, "finished job %d of %d is kept", i+1, len(order))
		}
	}
	for _, id := range waiting {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateAvailable, j.State)
	}
	require.EqualValues(t, 7, s.DroppedFinished())
	c := countStates(t, s)
	require.EqualValues(t, 5, c[store.StateCompleted]+c[store.StateDiscarded]+c[store.StateCancelled])
	require.EqualValues(t, 20, c[store.StateAvailable])
}

// TestMaxFinishedDefault: New keeps DefaultMaxFinished finished jobs, and a batch finishing more than
// that at once keeps the newest of them.
func TestMaxFinishedDefault(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	n := memory.DefaultMaxFinished + 500
	insertAvailable(t, s, "q", n)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: n, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	cs := make([]store.Completion, n)
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: 1, State: store.StateCompleted}
	}
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied, "every completion is applied, dropped or not")
	}
	require.EqualValues(t, memory.DefaultMaxFinished, countStates(t, s)[store.StateCompleted])
	require.EqualValues(t, 500, s.DroppedFinished())
	_, err = s.GetJob(ctx, jobs[n-1].ID)
	require.NoError(t, err, "a job of the latest finish is kept")
}

// TestMaxFinishedZeroKeepsAll: WithMaxFinished(0) keeps every finished job until Cleanup.
func TestMaxFinishedZeroKeepsAll(t *testing.T) {
	s := memory.New(memory.WithMaxFinished(0))
	insertAvailable(t, s, "q", 50)
	finishOneByOne(t, s, "q", 50, store.StateCompleted)
	require.EqualValues(t, 50, countStates(t, s)[store.StateCompleted])
	require.Zero(t, s.DroppedFinished())
	n, err := s.Cleanup(t.Context(), store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 50, n)
}

// TestMaxFinishedFreesUniqueKeys: a dropped job gives up its unique key, as retention's deletion does.
func TestMaxFinishedFreesUniqueKeys(t *testing.T) {
	s := memory.New(memory.WithMaxFinished(1))
	ctx := t.Context()
	mk := func(key string) *store.InsertParams {
		return &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, UniqueKey: key,
			UniqueStates: []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}}
	}
	_, err := s.Insert(ctx, []*store.InsertParams{mk("a")})
	require.NoError(t, err)
	finishOneByOne(t, s, "q", 1, store.StateCompleted)
	_, err = s.Insert(ctx, []*store.InsertParams{mk("a")})
	require.ErrorIs(t, err, store.ErrUniqueConflict, "the kept completed job holds its key")

	_, err = s.Insert(ctx, []*store.InsertParams{mk("b")})
	require.NoError(t, err)
	finishOneByOne(t, s, "q", 1, store.StateCompleted) // drops the holder of "a"
	_, err = s.Insert(ctx, []*store.InsertParams{mk("a")})
	require.NoError(t, err, "the dropped job's key is free")
}

// TestClosedStoreIsGarbage: a Store whose cron, bound and schema tables were used is garbage once
// nothing references it (they once lived in package-level maps keyed by the Store, which kept every
// Store and its jobs alive for the life of the process).
func TestClosedStoreIsGarbage(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	insertAvailable(t, s, "q", 10)
	require.NoError(t, s.SetQueueMaxDepth(ctx, "q", 100))
	require.NoError(t, s.SchemaCreate(ctx, &store.JobSchema{URI: "urn:k", Kind: "k", Version: "1", Schema: json.RawMessage(`{}`)}))
	_, err := s.CronList(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	w := weak.Make(s)
	s = nil
	for i := 0; i < 100 && w.Value() != nil; i++ {
		runtime.GC()
	}
	require.Nil(t, w.Value(), "the closed store was collected")
}
