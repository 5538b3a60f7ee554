package sqlite

import (
	"testing"

	"github.com/pronto-jobs/pronto/store"
	"github.com/stretchr/testify/require"
)

// TestFinishSize: every batch size gets a statement at least as large with at most 15 padding rows,
// from twelve statement sizes in all, whose texts are built once.
func TestFinishSize(t *testing.T) {
	sizes := map[int]bool{}
	for n := 1; n <= finishChunk; n++ {
		size := finishSize(n)
		require.GreaterOrEqual(t, size, n)
		require.LessOrEqual(t, size-n, 15, "padding of a batch of %d", n)
		require.Equal(t, finishBatchSQL(size, true), finishQuery(n, true))
		require.Equal(t, finishBatchSQL(size, false), finishQuery(n, false))
		sizes[size] = true
	}
	require.Len(t, sizes, 12)
}

// TestFinishEveryBatchSize finishes batches of every size from 1 to 130 (the last two split across
// statements) and checks that each completion is applied once and nothing else changes.
func TestFinishEveryBatchSize(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	total := 0
	for n := 1; n <= finishChunk+2; n++ {
		total += n
	}
	for i := 0; i < total; i += 1000 {
		_, err := s.Insert(ctx, params("q", min(1000, total-i)))
		require.NoError(t, err)
	}
	for n := 1; n <= finishChunk+2; n++ {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: n, WorkerID: "w", LeaseDuration: 60e9})
		require.NoError(t, err)
		require.Len(t, jobs, n)
		cs := make([]store.Completion, n)
		for i, j := range jobs {
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
		}
		res, err := s.Finish(ctx, cs)
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Applied, "batch of %d: completion %d applied", n, i)
			require.Equal(t, jobs[i].ID, r.ID)
		}
	}
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.EqualValues(t, total, qs[0].Counts[store.StateCompleted])
	require.Zero(t, qs[0].Counts[store.StateActive]+qs[0].Counts[store.StateAvailable])
}
