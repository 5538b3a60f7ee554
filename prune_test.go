package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type doomedArgs struct {
	Queue string `json:"queue"`
}

func (doomedArgs) Kind() string { return "test.doomed" }

// TestDeadLetterMaxCount, on every store: with DiscardedMaxCount 2, the leader's cleanup deletes the
// oldest discarded jobs beyond the newest two, emits EventDeadLetterPruned per queue with the count,
// and leaves other terminal jobs alone.
func TestDeadLetterMaxCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[doomedArgs]) error {
			return pronto.Discard(errors.New("doomed"))
		}))
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error { return nil }))
		cfg := fastConfig(workers, map[string]pronto.QueueConfig{"qa": {MaxWorkers: 1}, "qb": {MaxWorkers: 1}})
		cfg.DiscardedMaxCount = 2
		c, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		pronto.SetCleanupInterval(c, 50*time.Millisecond)
		events, unsubscribe := c.Subscribe(pronto.EventDeadLetterPruned, pronto.EventDiscarded)
		defer unsubscribe()

		// Five discarded jobs over two queues; the cleanup runs only once the client starts, after
		// all five are discarded.
		var ids []string
		for i := range 5 {
			q := "qa"
			if i%2 == 1 {
				q = "qb"
			}
			row, err := c.Insert(ctx, doomedArgs{Queue: q}, &pronto.InsertOpts{Queue: q})
			require.NoError(t, err)
			ids = append(ids, row.ID)
		}
		done, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Queue: "qa"})
		require.NoError(t, err)
		// Discard them one by one before the leader prunes: run the workers on a second client
		// without maintenance, then start the pruning client.
		wcfg := fastConfig(workers, map[string]pronto.QueueConfig{"qa": {MaxWorkers: 1}, "qb": {MaxWorkers: 1}})
		wcfg.DisableMaintenance = true
		wcfg.RescueInterval = 0
		worker := startClient(t, ts.reopen(t), wcfg)
		for _, id := range ids {
			waitState(t, worker, id, pronto.StateDiscarded)
		}
		waitState(t, worker, done.ID, pronto.StateCompleted)
		require.NoError(t, worker.Stop(ctx))
		var rows []*pronto.JobRow
		for _, id := range ids {
			j, err := c.JobGet(ctx, id)
			require.NoError(t, err)
			rows = append(rows, j)
		}

		require.NoError(t, c.Start(ctx))
		defer c.Stop(ctx)
		pruned := map[string]int{}
		deadline := time.After(20 * time.Second)
		for pruned["qa"]+pruned["qb"] < 3 {
			select {
			case e := <-events:
				if e.Kind == pronto.EventDeadLetterPruned {
					require.Positive(t, e.Count)
					pruned[e.Job.Queue] += e.Count
				}
			case <-deadline:
				t.Fatalf("pruned %v, want 3 jobs", pruned)
			}
		}
		// The oldest three by discard time go. Jobs discarded in one outcome batch share a time, so
		// which of them counts as older is the store's order: check what went against what stayed.
		deleted := map[string]int{}
		var gone, kept []*pronto.JobRow
		for _, j := range rows {
			got, err := c.JobGet(ctx, j.ID)
			if errors.Is(err, pronto.ErrNotFound) {
				gone = append(gone, j)
				deleted[j.Queue]++
				continue
			}
			require.NoError(t, err)
			require.Equal(t, pronto.StateDiscarded, got.State)
			kept = append(kept, j)
		}
		require.Len(t, gone, 3, "three discarded jobs pruned, two kept (max count 2)")
		require.Equal(t, deleted, pruned, "the events count the jobs that went, per queue")
		for _, g := range gone {
			for _, k := range kept {
				require.False(t, g.CompletedAt.After(k.CompletedAt), "a pruned job was discarded after a kept one")
			}
		}
		_, err = c.JobGet(ctx, done.ID)
		require.NoError(t, err, "completed jobs are not the dead letter queue")
	})
}
