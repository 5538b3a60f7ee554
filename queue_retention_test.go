package pronto_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestQueueRetentionPerQueue, on every store: a queue with a retention of its own has its
// completed and cancelled jobs deleted by it, shorter or longer than the client's, a zero in it
// follows the client's, and the other queues keep the client's; the retentions are stored, read
// back and checked, and removing one returns the queue to the client's.
func TestQueueRetentionPerQueue(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var cleanups atomic.Int64
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error { return nil }))
		cfg := fastConfig(workers, map[string]pronto.QueueConfig{"qr-short": {MaxWorkers: 2}, "qr-keep": {MaxWorkers: 2},
			"qr-other": {MaxWorkers: 2}})
		cfg.CompletedRetention = time.Hour
		cfg.CancelledRetention = time.Millisecond
		cfg.SystemHook = func(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
			return ctx, func(int, error) {
				if p.Op == pronto.SystemOpCleanup {
					cleanups.Add(1)
				}
			}
		}
		c, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		pronto.SetCleanupInterval(c, 20*time.Millisecond)

		require.ErrorIs(t, c.QueueRetentionSet(ctx, "bad queue!", pronto.QueueRetention{Completed: time.Hour}), pronto.ErrInvalidArgs)
		require.ErrorIs(t, c.QueueRetentionSet(ctx, "q", pronto.QueueRetention{Cancelled: -time.Hour}), pronto.ErrInvalidArgs)
		require.NoError(t, c.QueueRetentionSet(ctx, "qr-short", pronto.QueueRetention{Completed: time.Millisecond}))
		require.NoError(t, c.QueueRetentionSet(ctx, "qr-keep", pronto.QueueRetention{Cancelled: 30 * 24 * time.Hour}))
		got, err := c.QueueRetentions(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]pronto.QueueRetention{
			"qr-short": {Completed: time.Millisecond},
			"qr-keep":  {Cancelled: 30 * 24 * time.Hour},
		}, got)

		count := func(q string, st pronto.State) int {
			page, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{q}, States: []pronto.State{st}})
			require.NoError(t, err)
			return len(page.Jobs)
		}
		for i := range 3 {
			for _, q := range []string{"qr-short", "qr-keep", "qr-other"} {
				_, err := c.Insert(ctx, noopArgs{N: i}, &pronto.InsertOpts{Queue: q})
				require.NoError(t, err)
				later, err := c.Insert(ctx, noopArgs{N: i}, &pronto.InsertOpts{Queue: q, ScheduledAt: time.Now().Add(time.Hour)})
				require.NoError(t, err)
				_, err = c.JobCancel(ctx, later.ID)
				require.NoError(t, err)
			}
		}
		startBuilt(t, c)
		require.Eventually(t, func() bool {
			return count("qr-short", pronto.StateAvailable) == 0 && count("qr-short", pronto.StateActive) == 0 &&
				count("qr-short", pronto.StateCompleted) == 0 && count("qr-short", pronto.StateCancelled) == 0 &&
				count("qr-other", pronto.StateCancelled) == 0 &&
				count("qr-other", pronto.StateCompleted) == 3 && count("qr-keep", pronto.StateCompleted) == 3
		}, 30*time.Second, 10*time.Millisecond, "qr-short's completed jobs go by its own retention, the cancelled by the client's")
		from := cleanups.Load()
		require.Eventually(t, func() bool { return cleanups.Load() >= from+2 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 3, count("qr-keep", pronto.StateCancelled), "qr-keep keeps its cancelled jobs longer than the client")
		require.Equal(t, 3, count("qr-keep", pronto.StateCompleted), "and its completed ones by the client's hour")
		require.Equal(t, 3, count("qr-other", pronto.StateCompleted), "the others keep the client's hour")

		require.NoError(t, c.QueueRetentionSet(ctx, "qr-short", pronto.QueueRetention{}))
		got, err = c.QueueRetentions(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]pronto.QueueRetention{"qr-keep": {Cancelled: 30 * 24 * time.Hour}}, got)
		_, err = c.Insert(ctx, noopArgs{N: 9}, &pronto.InsertOpts{Queue: "qr-short"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return count("qr-short", pronto.StateCompleted) == 1 }, 30*time.Second, 10*time.Millisecond)
		from = cleanups.Load()
		require.Eventually(t, func() bool { return cleanups.Load() >= from+2 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, count("qr-short", pronto.StateCompleted), "back under the client's hour")
	})
}
