package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type workerStopArgs struct{}

func (workerStopArgs) Kind() string { return "worker.stop.args" }

// TestWorkerStoppedEvent: Stop of a started client ends with EventWorkerStopped, after the outcome
// of every job it ran, naming the client, its queues and the jobs it completed; a subscription to
// all kinds does not receive it (it carries no job). It was never emitted.
func TestWorkerStoppedEvent(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindMemory, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(context.Context, *pronto.Job[workerStopArgs]) error { return nil }))
		c, err := pronto.NewClient(ts.Store, &pronto.Config{ID: "stop-me", Workers: ws, PollInterval: 20 * time.Millisecond,
			Queues: map[string]pronto.QueueConfig{"b": {MaxWorkers: 2}, "a": {MaxWorkers: 1}}})
		require.NoError(t, err)
		named, unsubNamed := c.Subscribe(pronto.EventCompleted, pronto.EventWorkerStopped)
		defer unsubNamed()
		all, unsubAll := c.Subscribe()
		defer unsubAll()
		require.NoError(t, c.Start(ctx))
		for range 3 {
			_, err := c.Insert(ctx, workerStopArgs{}, &pronto.InsertOpts{Queue: "b"})
			require.NoError(t, err)
		}
		for n := 0; n < 3; {
			select {
			case ev := <-named:
				require.Equal(t, pronto.EventCompleted, ev.Kind)
				n++
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of 3 jobs completed", n)
			}
		}
		require.NoError(t, c.Stop(ctx))
		select {
		case ev := <-named:
			require.Equal(t, pronto.EventWorkerStopped, ev.Kind, "the event after the jobs' outcomes")
			require.Nil(t, ev.Job)
			require.NotNil(t, ev.Worker)
			require.Equal(t, "stop-me", ev.Worker.ID)
			require.Equal(t, []string{"a", "b"}, ev.Worker.Queues)
			require.Equal(t, "shutdown", ev.Worker.Reason)
			require.Equal(t, int64(3), ev.Worker.JobsCompleted)
			require.Positive(t, ev.Worker.Uptime)
			require.False(t, ev.At.IsZero())
		default:
			t.Fatal("Stop returned without EventWorkerStopped")
		}
		for len(all) > 0 {
			require.NotEqual(t, pronto.EventWorkerStopped, (<-all).Kind, "a subscription naming no kinds received it")
		}
	})
}
