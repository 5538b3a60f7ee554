package pronto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestDeadLetterRetentionPerQueue, on every store: a queue with a dead letter retention of its own
// is pruned by it and left out of the client's bounds (DiscardedMaxCount here), which prune the
// other queues together; the retentions are stored, read back and checked.
func TestDeadLetterRetentionPerQueue(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var cleanups atomic.Int64
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error {
			return errors.New("always")
		}))
		cfg := fastConfig(workers, map[string]pronto.QueueConfig{"dl-keep": {MaxWorkers: 2}, "dl-other": {MaxWorkers: 2}})
		cfg.DiscardedMaxCount = 2
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

		for _, bad := range []map[string]pronto.DeadLetterRetention{
			{"bad queue!": {MaxCount: 1}}, {"q": {}}, {"q": {MaxAge: -time.Hour}}, {"q": {MaxCount: -1}},
		} {
			require.ErrorIs(t, c.DeadLetterRetentionsSet(ctx, bad), pronto.ErrInvalidArgs, "%v", bad)
		}
		want := map[string]pronto.DeadLetterRetention{"dl-keep": {MaxAge: 365 * 24 * time.Hour, MaxCount: 5}}
		require.NoError(t, c.DeadLetterRetentionsSet(ctx, want))
		got, err := c.DeadLetterRetentions(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got)

		for i := range 4 {
			for _, q := range []string{"dl-keep", "dl-other"} {
				_, err := c.Insert(ctx, noopArgs{N: i}, &pronto.InsertOpts{Queue: q, MaxAttempts: 1})
				require.NoError(t, err)
			}
		}
		discarded := func(q string) int {
			page, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{q}, States: []pronto.State{pronto.StateDiscarded}})
			require.NoError(t, err)
			return len(page.Jobs)
		}
		unfinished := func() int {
			page, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{"dl-keep", "dl-other"},
				States: []pronto.State{pronto.StateAvailable, pronto.StateActive, pronto.StateRetryable, pronto.StateScheduled}})
			require.NoError(t, err)
			return len(page.Jobs)
		}
		startBuilt(t, c)
		// Every job fails once and is discarded; only then are the counts below final (a job still
		// running when they are read would be discarded after them).
		require.Eventually(t, func() bool { return unfinished() == 0 }, 30*time.Second, 10*time.Millisecond)
		// dl-other is held to the client's 2; dl-keep to its own 5, so it keeps all 4.
		require.Eventually(t, func() bool { return discarded("dl-keep") == 4 && discarded("dl-other") == 2 },
			30*time.Second, 10*time.Millisecond)
		from := cleanups.Load()
		require.Eventually(t, func() bool { return cleanups.Load() >= from+2 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 4, discarded("dl-keep"), "a queue with its own retention is out of the client's count")
		require.Equal(t, 2, discarded("dl-other"))

		require.NoError(t, c.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{"dl-keep": {MaxCount: 1}}))
		require.Eventually(t, func() bool { return discarded("dl-keep") == 1 }, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 2, discarded("dl-other"))

		// Removed, dl-keep joins the others under the client's bound of 2 in all.
		require.NoError(t, c.DeadLetterRetentionsSet(ctx, nil))
		got, err = c.DeadLetterRetentions(ctx)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Eventually(t, func() bool { return discarded("dl-keep")+discarded("dl-other") == 2 }, 30*time.Second, 10*time.Millisecond)
	})
}
