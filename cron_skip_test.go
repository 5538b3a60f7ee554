package pronto_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// An occurrence that inserts no job says why (CronFire.SkipReason: the overlap policy or the
// template's unique policy) and leaves the registration's LastRunAt and RunCount at the last one
// that did, on every store.
func TestRunCronSkipReasonKeepsLastRun(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		fires := map[string][]pronto.CronFire{}
		cfg := &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
			mu.Lock()
			fires[f.Name] = append(fires[f.Name], f)
			mu.Unlock()
		}}
		c := startClient(t, ts.Store, &pronto.Config{LeaderTTL: time.Second})
		// Nothing works these queues: each first job stays available, unfinished.
		_, err := c.CronRegister(ctx, pronto.CronJob{Name: "overlap", Expression: "@every 1s", Kind: "cron.skip",
			Opts: pronto.InsertOpts{Queue: "skip-overlap"}})
		require.NoError(t, err)
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "unique", Expression: "@every 1s", Kind: "cron.skip",
			OverlapPolicy: pronto.CronAllow, Opts: pronto.InsertOpts{Queue: "skip-unique", Unique: &pronto.UniqueOpts{}}})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- c.RunCron(ctx, cfg) }()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fires["overlap"]) >= 2 && len(fires["unique"]) >= 2
		}, 15*time.Second, 50*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		for name, reason := range map[string]pronto.CronSkipReason{"overlap": pronto.CronSkipOverlap, "unique": pronto.CronSkipUnique} {
			fs := fires[name]
			require.NotNil(t, fs[0].Job, "%s: the first occurrence inserts", name)
			for _, f := range fs[1:] {
				require.True(t, f.Skipped, "%s: later occurrences are skipped: %+v", name, f)
				require.Equal(t, reason, f.SkipReason, name)
				require.Equal(t, fs[0].Job.ID, f.PreviousJobID, name)
			}
			reg, err := c.CronGet(context.Background(), name)
			require.NoError(t, err)
			require.True(t, reg.LastRunAt.Equal(fs[0].ScheduledAt), "%s: last run %v, want the one that inserted, %v",
				name, reg.LastRunAt, fs[0].ScheduledAt)
			require.Equal(t, int64(1), reg.RunCount, name)
			require.Equal(t, fs[0].Job.ID, reg.LastJobID, name)
		}
	})
}

// A registration given Paused is stored paused: never due, it fires nothing until resumed.
func TestCronRegisterPaused(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		j, err := c.CronRegister(ctx, pronto.CronJob{Name: "born-paused", Expression: "* * * * * *", Kind: "cron.skip", Paused: true})
		require.NoError(t, err)
		require.True(t, j.Paused)
		got, err := c.CronGet(ctx, "born-paused")
		require.NoError(t, err)
		require.True(t, got.Paused, "stored paused")
		due, err := ts.Store.(store.CronStore).CronDue(ctx, time.Now().Add(time.Hour), 100)
		require.NoError(t, err)
		for _, s := range due {
			require.NotEqual(t, "born-paused", s.Name, "a registration made paused is due")
		}
		j, err = c.CronResume(ctx, "born-paused")
		require.NoError(t, err)
		require.False(t, j.Paused)
	})
}
