package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testQueueBounds: bounds are stored, replaced and removed; depths count the non-terminal jobs of
// the queues asked for, 0 for a queue without jobs.
func testQueueBounds(t *testing.T, s store.Store) {
	qb, ok := s.(store.QueueBounder)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.QueueBounder", s)
	}
	c := ctx(t)
	q, empty := uniq("bounded"), uniq("empty")
	require.NoError(t, qb.SetQueueMaxDepth(c, q, 10))
	require.NoError(t, qb.SetQueueMaxDepth(c, q, 3))
	got, err := qb.QueueMaxDepths(c)
	require.NoError(t, err)
	require.Equal(t, int64(3), got[q])

	inState(t, s, q, store.StateCompleted)
	inState(t, s, q, store.StateDiscarded)
	inState(t, s, q, store.StateScheduled)
	insert(t, s, job(q), job(q))
	require.Len(t, claim(t, s, q, 1), 1)

	depths, err := qb.QueueDepths(c, []string{q, empty})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{q: 3, empty: 0}, depths, "available and active count, completed does not")

	require.NoError(t, qb.SetQueueMaxDepth(c, q, 0))
	got, err = qb.QueueMaxDepths(c)
	require.NoError(t, err)
	_, still := got[q]
	require.False(t, still, "0 removes the bound")
}
