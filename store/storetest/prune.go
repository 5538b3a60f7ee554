package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
