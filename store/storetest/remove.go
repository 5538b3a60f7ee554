package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// queueCounts returns queue's job counts by state (none when the store lists no such queue).
func queueCounts(t testing.TB, s store.Store, queue string) map[store.State]int64 {
	t.Helper()
	qs, err := s.ListQueues(ctx(t))
	require.NoError(t, err)
	for _, q := range qs {
		if q.Name == queue {
			return q.Counts
		}
	}
	return map[store.State]int64{}
}

// testFinishRemoveCompleted: a completion with Remove deletes a completed job, in a batch beside
// completions without it; Remove is ignored for other states and fenced like any completion; a
// removed job's rate-limit slot is free again.
func testFinishRemoveCompleted(t *testing.T, s store.Store) {
	q := uniq("remove")
	gone, kept, retried, stale := job(q), job(q), job(q), job(q)
	retried.MaxAttempts = 5
	insert(t, s, gone, kept, retried, stale)
	jobs := claim(t, s, q, 10)
	require.Len(t, jobs, 4)
	byID := map[string]*store.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	g, k, r, st := byID[gone.ID], byID[kept.ID], byID[retried.ID], byID[stale.ID]

	res, err := s.Finish(ctx(t), []store.Completion{
		{ID: g.ID, Attempt: 1, Token: g.ClaimToken, State: store.StateCompleted, Result: json.RawMessage(`{"n":1}`), Remove: true},
		{ID: k.ID, Attempt: 1, Token: k.ClaimToken, State: store.StateCompleted, Result: json.RawMessage(`{"n":2}`)},
		{ID: r.ID, Attempt: 1, Token: r.ClaimToken, State: store.StateRetryable, ScheduledAt: time.Now().Add(time.Hour),
			Error: &store.AttemptError{Attempt: 1, Type: "boom", Message: "failed"}, Remove: true},
		// Fenced: another claim's token. The job stays active, and is not removed.
		{ID: st.ID, Attempt: 1, Token: k.ClaimToken, State: store.StateCompleted, Remove: true},
	})
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.True(t, res[0].Applied, "the removed job's completion is applied")
	require.True(t, res[1].Applied)
	require.True(t, res[2].Applied)
	require.False(t, res[3].Applied, "a fenced completion is not applied, Remove or not")

	requireAbsent(t, s, g.ID)
	kj := get(t, s, k.ID)
	require.Equal(t, store.StateCompleted, kj.State, "a completion without Remove keeps its job")
	require.JSONEq(t, `{"n":2}`, string(kj.Result))
	require.Equal(t, store.StateRetryable, get(t, s, r.ID).State, "Remove applies to completed jobs only")
	require.Equal(t, store.StateActive, get(t, s, st.ID).State, "a fenced completion leaves its job alone")

	counts := queueCounts(t, s, q)
	require.Equal(t, int64(1), counts[store.StateCompleted], "the removed job is not counted")
	require.Equal(t, int64(1), counts[store.StateActive])
	require.Equal(t, int64(1), counts[store.StateRetryable])

	// The stale job completes with Remove under its own token; a second completion of the removed
	// job is not applied (it is no longer active: it is no longer anything).
	require.True(t, finish(t, s, store.Completion{ID: st.ID, Attempt: 1, Token: st.ClaimToken, State: store.StateCompleted, Remove: true}))
	requireAbsent(t, s, st.ID)
	require.False(t, finish(t, s, store.Completion{ID: g.ID, Attempt: 1, Token: g.ClaimToken, State: store.StateCompleted, Remove: true}))

	// A removed job frees its rate key's slot as a kept one does: with one job of the key active at
	// a time, the second is claimable once the first is removed.
	key := uniq("rk")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1, OnLimit: store.LimitWait})
	rq := uniq("remove-rated")
	first, second := job(rq), job(rq)
	first.RateKey, second.RateKey = key, key
	insert(t, s, first, second)
	got := claim(t, s, rq, 10)
	require.Len(t, got, 1, "one job of the key at a time")
	require.Empty(t, claim(t, s, rq, 10), "the key's one slot is taken")
	require.True(t, finish(t, s, store.Completion{ID: got[0].ID, Attempt: got[0].Attempt, Token: got[0].ClaimToken,
		State: store.StateCompleted, Remove: true}))
	requireAbsent(t, s, got[0].ID)
	var next []*store.Job
	require.Eventually(t, func() bool {
		next = claim(t, s, rq, 10)
		return len(next) == 1
	}, waitTimeout, 5*time.Millisecond, "the removed job's slot is free")
	require.NotEqual(t, got[0].ID, next[0].ID)
}

// testFinishRemoveKeeps: Remove keeps completed what others read once it is: a workflow's job (its
// child is released with its result) and a unique job whose key holds while completed; a unique job
// whose key does not hold then is removed, and its key is free.
func testFinishRemoveKeeps(t *testing.T, s store.Store) {
	q := uniq("remove-keeps")
	wf := uniq("wf")
	parent := member(wf, q)
	child := member(wf, q, parent)
	insertWorkflow(t, s, wf, parent, child)
	p := reclaim(t, s, q, parent.Kind, parent.ID, worker, lease)
	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: 1, Token: p.ClaimToken, State: store.StateCompleted,
		Result: json.RawMessage(`{"made":7}`), Remove: true}))
	pj := get(t, s, p.ID)
	require.Equal(t, store.StateCompleted, pj.State, "a workflow's job is kept")
	require.JSONEq(t, `{"made":7}`, string(pj.Result))
	c := reclaim(t, s, q, child.Kind, child.ID, worker, lease)
	require.JSONEq(t, `[{"made":7}]`, string(c.ParentResults), "the child reads its parent's result")

	holdKey, freeKey := uniq("hold"), uniq("free")
	holder := uniqueJob(q, holdKey, store.ConflictReject)
	holder.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}
	a := active(t, s, holder)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, Token: a.ClaimToken, State: store.StateCompleted, Remove: true}))
	require.Equal(t, store.StateCompleted, get(t, s, a.ID).State, "a job whose key holds while completed is kept")
	_, err := s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, holdKey, store.ConflictReject)})
	requireConflict(t, err, holdKey, a.ID, store.StateCompleted)

	free := uniqueJob(q, freeKey, store.ConflictReject)
	free.UniqueStates = []store.State{store.StateAvailable, store.StateActive}
	b := active(t, s, free)
	require.True(t, finish(t, s, store.Completion{ID: b.ID, Attempt: 1, Token: b.ClaimToken, State: store.StateCompleted, Remove: true}))
	requireAbsent(t, s, b.ID)
	insert(t, s, uniqueJob(q, freeKey, store.ConflictReject))
}
