package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestRemoveCompleted: a queue with RemoveCompleted loses its jobs as they complete (after their
// completed event, which carries the result), keeps the jobs that fail for good, and leaves the jobs
// of other queues completed, on every store.
func TestRemoveCompleted(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			return pronto.RecordResult(ctx, map[string]int{"n": j.Args.N})
		}))
		pronto.AddWorker(workers, failWorker())
		c := startClient(t, ts.Store, fastConfig(workers, map[string]pronto.QueueConfig{
			"gone": {MaxWorkers: 4, RemoveCompleted: true},
			"kept": {MaxWorkers: 4},
		}))
		events, unsub := c.Subscribe(pronto.EventCompleted)
		defer unsub()

		removed, err := c.Insert(ctx, echoArgs{N: 7}, &pronto.InsertOpts{Queue: "gone"})
		require.NoError(t, err)
		kept, err := c.Insert(ctx, echoArgs{N: 8}, &pronto.InsertOpts{Queue: "kept"})
		require.NoError(t, err)
		failed, err := c.Insert(ctx, failArgs{FailTimes: 1, Mode: "discard"}, &pronto.InsertOpts{Queue: "gone"})
		require.NoError(t, err)

		seen := map[string]*pronto.Event{}
		for len(seen) < 2 {
			select {
			case e := <-events:
				seen[e.Job.ID] = e
			case <-time.After(15 * time.Second):
				t.Fatalf("completed events: %d of 2", len(seen))
			}
		}
		require.JSONEq(t, `{"n":7}`, string(seen[removed.ID].Job.Result), "the removed job's event carries its result")

		require.Eventually(t, func() bool {
			_, err := c.JobGet(ctx, removed.ID)
			return err != nil
		}, 15*time.Second, 10*time.Millisecond, "the completed job of queue gone is removed")
		_, err = c.JobGet(ctx, removed.ID)
		require.ErrorIs(t, err, pronto.ErrNotFound)

		done := waitState(t, c, kept.ID, pronto.StateCompleted)
		require.JSONEq(t, `{"n":8}`, string(done.Result), "queue kept keeps its completed job")
		waitState(t, c, failed.ID, pronto.StateDiscarded)
	})
}
