package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// oneWorkerClaim claims as a store path that records one worker id on every job would.
func oneWorkerClaim(s store.Store) func(context.Context, store.ClaimParams) ([]*store.Job, error) {
	return func(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
		p.WorkerIDs = nil
		return s.Claim(ctx, p)
	}
}

func insertN(t *testing.T, s store.Store, n int) {
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: []byte(`{}`),
			State: store.StateAvailable, MaxAttempts: 3}
	}
	_, err := s.Insert(context.Background(), ps)
	require.NoError(t, err)
}

// TestClaimThenReassign: a claim for several workers made through a one-worker claim path gives the
// jobs the first entries, one each, recording only those that differ from the first; if recording
// fails, the jobs go back to available with their attempt refunded and the claim fails.
func TestClaimThenReassign(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	insertN(t, s, 3)
	var recorded []string
	jobs, err := store.ClaimThenReassign(ctx, s, store.ClaimParams{Queue: "q", WorkerIDs: []string{"a", "b", "a", "c"},
		LeaseDuration: time.Minute}, oneWorkerClaim(s), func(_ context.Context, js []*store.Job) error {
		for _, j := range js {
			recorded = append(recorded, j.WorkerID)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	got := []string{jobs[0].WorkerID, jobs[1].WorkerID, jobs[2].WorkerID}
	require.ElementsMatch(t, []string{"a", "b", "a"}, got)
	require.Equal(t, []string{"b"}, recorded, "only the job that did not get the first entry is recorded again")

	insertN(t, s, 2)
	boom := errors.New("lost connection")
	_, err = store.ClaimThenReassign(ctx, s, store.ClaimParams{Queue: "q", WorkerIDs: []string{"x", "y"},
		LeaseDuration: time.Minute}, oneWorkerClaim(s), func(context.Context, []*store.Job) error { return boom })
	require.ErrorIs(t, err, boom)
	avail, _, err := s.ListJobs(ctx, store.ListParams{Queues: []string{"q"}, States: []store.State{store.StateAvailable}})
	require.NoError(t, err)
	require.Len(t, avail, 2, "the claim's jobs are released")
	for _, j := range avail {
		require.Equal(t, 4, j.MaxAttempts, "the attempt the failed claim used is refunded")
	}
}
