package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// testPruneDiscarded: PruneDiscarded deletes discarded jobs only, by count (the newest Keep of the
// whole store kept), by age, within Limit, and reports the queues it deleted from.
func testPruneDiscarded(t *testing.T, s store.Store) {
	pr, ok := s.(store.DiscardedPruner)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.DiscardedPruner", s)
	}
	var dead []string // in discard order, oldest first
	for i := range 5 {
		q := "prune-a"
		if i%2 == 1 {
			q = "prune-b"
		}
		dead = append(dead, inState(t, s, q, store.StateDiscarded).ID)
		time.Sleep(2 * time.Millisecond) // distinct completion times, in order
	}
	other := []string{inState(t, s, "prune-a", store.StateCompleted).ID, inState(t, s, "prune-a", store.StateCancelled).ID,
		inState(t, s, "prune-a", store.StateAvailable).ID}

	got, err := pr.PruneDiscarded(ctx(t), store.PruneParams{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, got, "no bound deletes nothing")
	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{Keep: 5, Before: time.Now().Add(-time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Empty(t, got, "within both bounds")
	requirePresent(t, s, dead...)

	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{Keep: 2, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 1, sum(got), "at most Limit")
	got2, err := pr.PruneDiscarded(ctx(t), store.PruneParams{Keep: 2, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, sum(got2))
	for q, n := range got2 {
		got[q] += n
	}
	require.Equal(t, map[string]int{"prune-a": 2, "prune-b": 1}, got, "the three oldest, from their queues")
	requireGone(t, s, dead[:3]...)
	requirePresent(t, s, dead[3:]...)
	requirePresent(t, s, other...)

	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{Before: time.Now().Add(time.Minute), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"prune-a": 1, "prune-b": 1}, got, "by age")
	requireGone(t, s, dead...)
	requirePresent(t, s, other...)
}

// testPruneDiscardedQueues: Queues limits a pass to some queues (Keep counting their jobs only), and
// SkipQueues leaves queues out of a pass and out of its count (ojs-dead-letter.md 5.3: queues with
// a retention of their own).
func testPruneDiscardedQueues(t *testing.T, s store.Store) {
	pr, ok := s.(store.DiscardedPruner)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.DiscardedPruner", s)
	}
	dead := map[string]string{} // a1, b1, c1, a2, b2, c2 in discard order
	for _, n := range []string{"1", "2"} {
		for _, q := range []string{"a", "b", "c"} {
			dead[q+n] = inState(t, s, "pq-"+q, store.StateDiscarded).ID
			time.Sleep(2 * time.Millisecond) // distinct completion times, in order
		}
	}
	got, err := pr.PruneDiscarded(ctx(t), store.PruneParams{Queues: []string{"pq-a"}, Keep: 1, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pq-a": 1}, got, "Keep counts the queues named only")
	requireGone(t, s, dead["a1"])
	requirePresent(t, s, dead["a2"], dead["b1"], dead["c1"], dead["b2"], dead["c2"])

	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{SkipQueues: []string{"pq-a"}, Keep: 2, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pq-b": 1, "pq-c": 1}, got, "the newest 2 of b and c kept, a2 neither counted nor deleted")
	requireGone(t, s, dead["b1"], dead["c1"])
	requirePresent(t, s, dead["a2"], dead["b2"], dead["c2"])

	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{Queues: []string{"pq-b", "pq-c"}, SkipQueues: []string{"pq-c"},
		Before: time.Now().Add(time.Minute), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pq-b": 1}, got, "by age, of b only")
	requireGone(t, s, dead["b2"])
	requirePresent(t, s, dead["a2"], dead["c2"])
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// testPruneArchiveSteps: PruneCandidates names what PruneDiscarded would delete, oldest first,
// without deleting it, and DeleteDiscarded deletes exactly the versions read: a job retried since,
// or retried and discarded again, is kept (ojs-dead-letter.md 8.2, archive before delete).
func testPruneArchiveSteps(t *testing.T, s store.Store) {
	ar, ok := s.(store.DiscardedArchiver)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.DiscardedArchiver", s)
	}
	var dead []*store.Job // in discard order, oldest first
	for i := range 5 {
		q := "arch-a"
		if i%2 == 1 {
			q = "arch-b"
		}
		dead = append(dead, inState(t, s, q, store.StateDiscarded))
		time.Sleep(2 * time.Millisecond) // distinct completion times, in order
	}
	done := inState(t, s, "arch-a", store.StateCompleted)

	none, err := ar.PruneCandidates(ctx(t), store.PruneParams{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, none, "no bound selects nothing")
	cands, err := ar.PruneCandidates(ctx(t), store.PruneParams{Keep: 2, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, ids(dead[:3]), ids(cands), "the three oldest, oldest first")
	for i, c := range cands {
		require.Equal(t, store.StateDiscarded, c.State)
		require.Equal(t, dead[i].Queue, c.Queue)
		require.Equal(t, dead[i].Kind, c.Kind)
		require.JSONEq(t, string(dead[i].Args), string(c.Args), "the whole job, for the archive")
		require.True(t, dead[i].CompletedAt.Equal(c.CompletedAt), "CompletedAt as stored")
	}
	requirePresent(t, s, ids(dead)...)
	one, err := ar.PruneCandidates(ctx(t), store.PruneParams{Keep: 2, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, ids(dead[:1]), ids(one), "at most Limit")
	byAge, err := ar.PruneCandidates(ctx(t), store.PruneParams{Before: dead[2].CompletedAt, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, ids(dead[:2]), ids(byAge), "by age: finished before Before")
	ofB, err := ar.PruneCandidates(ctx(t), store.PruneParams{Queues: []string{"arch-b"}, Keep: 1, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{dead[1].ID}, ids(ofB), "Keep counts the queues named only")
	notB, err := ar.PruneCandidates(ctx(t), store.PruneParams{SkipQueues: []string{"arch-b"}, Keep: 1, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, []string{dead[0].ID, dead[2].ID}, ids(notB), "SkipQueues left out")

	// Between the read and the delete: dead[1] is retried (available now), dead[2] is retried and
	// discarded again (a newer CompletedAt than the version read).
	_, err = s.RetryJob(ctx(t), dead[1].ID)
	require.NoError(t, err)
	_, err = s.RetryJob(ctx(t), dead[2].ID)
	require.NoError(t, err)
	again := reclaim(t, s, dead[2].Queue, dead[2].Kind, dead[2].ID, worker, lease)
	time.Sleep(2 * time.Millisecond)
	require.True(t, finish(t, s, store.Completion{ID: again.ID, Attempt: again.Attempt, State: store.StateDiscarded}))

	stale := *done
	stale.State = store.StateDiscarded
	missing := *dead[0]
	missing.ID = uuidv7.New()
	got, err := ar.DeleteDiscarded(ctx(t), append(cands, &stale, &missing))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"arch-a": 1}, got, "only dead[0] is still the version read")
	requireGone(t, s, dead[0].ID)
	require.Equal(t, store.StateAvailable, get(t, s, dead[1].ID).State, "a job retried since is kept")
	require.Equal(t, store.StateDiscarded, get(t, s, dead[2].ID).State, "a job discarded again is kept")
	requirePresent(t, s, dead[3].ID, dead[4].ID, done.ID)

	got, err = ar.DeleteDiscarded(ctx(t), nil)
	require.NoError(t, err)
	require.Empty(t, got)
	fresh, err := ar.PruneCandidates(ctx(t), store.PruneParams{Before: time.Now().Add(time.Minute), Limit: 100})
	require.NoError(t, err)
	got, err = ar.DeleteDiscarded(ctx(t), fresh)
	require.NoError(t, err)
	require.Equal(t, len(fresh), sum(got))
	requireGone(t, s, dead[2].ID, dead[3].ID, dead[4].ID)
	requirePresent(t, s, dead[1].ID, done.ID)
}

// testPruneDiscardedTies: jobs discarded by one Finish batch may share their CompletedAt to the
// microsecond; the count bound still keeps exactly the newest Keep, in both pruning steps.
func testPruneDiscardedTies(t *testing.T, s store.Store) {
	pr := s.(store.DiscardedPruner)
	ar, ok := s.(store.DiscardedArchiver)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.DiscardedArchiver", s)
	}
	for range 4 {
		insert(t, s, job("tie"))
	}
	jobs := claim(t, s, "tie", 4)
	require.Len(t, jobs, 4)
	cs := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateDiscarded}
	}
	_, err := s.Finish(ctx(t), cs)
	require.NoError(t, err)

	cands, err := ar.PruneCandidates(ctx(t), store.PruneParams{Queues: []string{"tie"}, Keep: 3, Limit: 100})
	require.NoError(t, err)
	require.Len(t, cands, 1, "beyond the newest 3 of 4")
	got, err := ar.DeleteDiscarded(ctx(t), cands)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"tie": 1}, got)
	got, err = pr.PruneDiscarded(ctx(t), store.PruneParams{Queues: []string{"tie"}, Keep: 1, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"tie": 2}, got, "beyond the newest 1 of 3")
	requireGone(t, s, cands[0].ID)
	left := 0
	for _, j := range jobs {
		if _, err := s.GetJob(ctx(t), j.ID); err == nil {
			left++
		}
	}
	require.Equal(t, 1, left)
}
