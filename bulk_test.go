package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// bulkJobs makes one job per state the bulk operations care about. Jobs in the "idle" queue are never
// claimed (the client works only the default queue).
type bulkJobs struct {
	available, scheduled, cancelled, completed, discarded string
}

func makeBulkJobs(t *testing.T, c *pronto.Client) bulkJobs {
	t.Helper()
	ctx := context.Background()
	insert := func(a pronto.JobArgs, opts *pronto.InsertOpts) string {
		j, err := c.Insert(ctx, a, opts)
		require.NoError(t, err)
		return j.ID
	}
	b := bulkJobs{
		available: insert(echoArgs{Message: "idle"}, &pronto.InsertOpts{Queue: "idle"}),
		scheduled: insert(echoArgs{Message: "later"}, &pronto.InsertOpts{Delay: time.Hour}),
		cancelled: insert(echoArgs{Message: "cancel me"}, &pronto.InsertOpts{Queue: "idle"}),
		completed: insert(failArgs{}, nil),
		discarded: insert(failArgs{FailTimes: 1, Mode: "discard"}, nil),
	}
	_, err := c.JobCancel(ctx, b.cancelled)
	require.NoError(t, err)
	waitState(t, c, b.completed, pronto.StateCompleted)
	waitState(t, c, b.discarded, pronto.StateDiscarded)
	return b
}

func bulkClient(t *testing.T, ts *testStore) *pronto.Client {
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, failWorker())
	return startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
}

// requireBulk checks one result: its id, and either the job's state after the operation or the error
// it must match.
func requireBulk(t *testing.T, r pronto.BulkResult, id string, state pronto.State, err error) {
	t.Helper()
	require.Equal(t, id, r.ID)
	if err != nil {
		require.ErrorIs(t, r.Err, err)
		require.Nil(t, r.Job)
		return
	}
	require.NoError(t, r.Err)
	require.NotNil(t, r.Job)
	require.Equal(t, id, r.Job.ID)
	require.Equal(t, state, r.Job.State)
}

func TestBulkCancelMany(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := bulkClient(t, ts)
		b := makeBulkJobs(t, c)
		unknown := uuidv7.New()
		res, err := c.JobCancelMany(ctx, []string{b.available, b.completed, unknown, "not-an-id", b.scheduled, b.cancelled})
		require.NoError(t, err)
		require.Len(t, res, 6)
		requireBulk(t, res[0], b.available, pronto.StateCancelled, nil)
		requireBulk(t, res[1], b.completed, "", pronto.ErrInvalidTransition)
		requireBulk(t, res[2], unknown, "", pronto.ErrNotFound)
		requireBulk(t, res[3], "not-an-id", "", pronto.ErrInvalidArgs)
		requireBulk(t, res[4], b.scheduled, pronto.StateCancelled, nil)
		requireBulk(t, res[5], b.cancelled, "", pronto.ErrInvalidTransition)
		// A refused item is left as it was.
		j, err := c.JobGet(ctx, b.completed)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCompleted, j.State)
	})
}

func TestBulkRetryMany(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := bulkClient(t, ts)
		b := makeBulkJobs(t, c)
		res, err := c.JobRetryMany(ctx, []string{b.cancelled, b.completed, b.available, b.scheduled, b.discarded})
		require.NoError(t, err)
		require.Len(t, res, 5)
		requireBulk(t, res[0], b.cancelled, pronto.StateAvailable, nil)
		requireBulk(t, res[1], b.completed, "", pronto.ErrInvalidTransition)
		requireBulk(t, res[2], b.available, "", pronto.ErrInvalidTransition)
		requireBulk(t, res[3], b.scheduled, "", pronto.ErrInvalidTransition)
		// The retried discarded job is available again, its attempts reset (it then runs, and is
		// discarded again by its first attempt).
		requireBulk(t, res[4], b.discarded, pronto.StateAvailable, nil)
		require.Zero(t, res[4].Job.Attempt)
		j, err := c.JobGet(ctx, b.scheduled)
		require.NoError(t, err)
		require.Equal(t, pronto.StateScheduled, j.State)
	})
}

func TestBulkDeleteMany(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := bulkClient(t, ts)
		b := makeBulkJobs(t, c)
		unknown := uuidv7.New()
		ids := []string{b.completed, b.available, b.cancelled, b.scheduled, unknown, b.discarded, "x"}
		res, err := c.JobDeleteMany(ctx, ids)
		require.NoError(t, err)
		require.Len(t, res, len(ids))
		requireBulk(t, res[0], b.completed, pronto.StateCompleted, nil)
		requireBulk(t, res[1], b.available, "", pronto.ErrInvalidTransition)
		requireBulk(t, res[2], b.cancelled, pronto.StateCancelled, nil)
		requireBulk(t, res[3], b.scheduled, "", pronto.ErrInvalidTransition)
		requireBulk(t, res[4], unknown, "", pronto.ErrNotFound)
		requireBulk(t, res[5], b.discarded, pronto.StateDiscarded, nil)
		requireBulk(t, res[6], "x", "", pronto.ErrInvalidArgs)
		for _, id := range []string{b.completed, b.cancelled, b.discarded} {
			_, err := c.JobGet(ctx, id)
			require.ErrorIs(t, err, pronto.ErrNotFound, id)
		}
		for _, id := range []string{b.available, b.scheduled} {
			_, err := c.JobGet(ctx, id)
			require.NoError(t, err, "a non-terminal job must survive a bulk delete")
		}
	})
}

func TestBulkLimits(t *testing.T) {
	ctx := context.Background()
	c := bulkClient(t, newTestStore(t, kindMemory))
	j, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Queue: "idle"})
	require.NoError(t, err)
	for name, op := range map[string]func(context.Context, []string) ([]pronto.BulkResult, error){
		"cancel": c.JobCancelMany, "retry": c.JobRetryMany, "delete": c.JobDeleteMany,
	} {
		_, err := op(ctx, nil)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, name)
		ids := make([]string, pronto.MaxBulkIDs+1)
		for i := range ids {
			ids[i] = j.ID
		}
		_, err = op(ctx, ids)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, name)
		require.ErrorContains(t, err, "at most 1000", name)
	}
	got, err := c.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pronto.StateAvailable, got.State, "an oversized list touches no job")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	res, err := c.JobCancelMany(cctx, []string{j.ID})
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, res)
}
