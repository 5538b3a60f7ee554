package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestGetProgressBatch: one read returns the progress of the listed jobs that have any, as
// GetProgress returns it one by one; jobs without progress and ids that are not UUIDs are left out.
func TestGetProgressBatch(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	ps := []*store.InsertParams{params("pb"), params("pb"), params("pb")}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "pb", Limit: 3, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	half := 0.5
	ok, err := s.SetProgress(ctx, store.ProgressParams{ID: jobs[0].ID, Value: &half})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.SetProgress(ctx, store.ProgressParams{ID: jobs[1].ID, Data: json.RawMessage(`{"rows":3}`)})
	require.NoError(t, err)
	require.True(t, ok)

	got, err := s.GetProgressBatch(ctx, []string{jobs[0].ID, jobs[1].ID, jobs[2].ID, "not-a-uuid"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, j := range jobs[:2] {
		one, err := s.GetProgress(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, one, got[j.ID], "job %s: as GetProgress gives it", j.ID)
	}
	empty, err := s.GetProgressBatch(ctx, []string{"not-a-uuid"})
	require.NoError(t, err)
	require.Empty(t, empty)
}
