package pronto_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestMaintenanceModeHoldsPromotionAndCron, on every store: while the store's maintenance setting is
// there (pronto serve's admin API writes it, ojs-admin-api.md 12.1), the leader leaves a due
// scheduled job scheduled and fires no cron occurrence; once it is gone, the job is promoted and the
// schedule fires the occurrence it missed, once.
func TestMaintenanceModeHoldsPromotionAndCron(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ss, ok := ts.Store.(store.SettingStore)
		require.True(t, ok, "every store keeps settings")
		require.NoError(t, ss.SetSetting(ctx, store.MaintenanceSetting,
			json.RawMessage(`{"enabled_at":"2026-11-30T00:00:00Z","paused_queues":[]}`)))

		dueAt := time.Now().Add(300 * time.Millisecond)
		var heldPolls atomic.Int64 // promotion passes begun after the job was due, while the mode is on
		var modeOn atomic.Bool
		modeOn.Store(true)
		hook := func(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
			begun := time.Now()
			return ctx, func(int, error) {
				if p.Op == pronto.SystemOpSchedulerPoll && begun.After(dueAt) && modeOn.Load() {
					heldPolls.Add(1)
				}
			}
		}
		c := startClient(t, ts.Store, &pronto.Config{LeaderTTL: time.Second, SystemHook: hook})
		job, err := c.Insert(ctx, noopArgs{N: 1}, &pronto.InsertOpts{Queue: "held-q", ScheduledAt: dueAt})
		require.NoError(t, err)

		reg, err := c.CronRegister(ctx, pronto.CronJob{Name: "held-tick", Expression: "@every 1s", Kind: "cron.tick",
			Opts: pronto.InsertOpts{Queue: "held-ticks"}})
		require.NoError(t, err)
		var mu sync.Mutex
		var fires []pronto.CronFire
		done := make(chan error, 1)
		go func() {
			done <- c.RunCron(ctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
				mu.Lock()
				fires = append(fires, f)
				mu.Unlock()
			}})
		}()

		// Two cron passes after the first occurrence fell due, and two promotion passes after the
		// job did, all held.
		require.Eventually(t, func() bool { return time.Now().After(reg.NextRunAt) }, 15*time.Second, 10*time.Millisecond)
		from := pronto.CronHeldPasses(c)
		require.Eventually(t, func() bool { return pronto.CronHeldPasses(c) >= from+2 && heldPolls.Load() >= 2 },
			15*time.Second, 10*time.Millisecond)
		mu.Lock()
		require.Empty(t, fires, "no occurrence fires in maintenance mode")
		mu.Unlock()
		now, err := c.CronGet(ctx, "held-tick")
		require.NoError(t, err)
		require.True(t, now.NextRunAt.Equal(reg.NextRunAt), "the due occurrence waits: next run %v, registered %v", now.NextRunAt, reg.NextRunAt)
		require.Zero(t, now.RunCount)
		got, err := c.JobGet(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateScheduled, got.State, "a due job is not promoted in maintenance mode")

		modeOn.Store(false)
		require.NoError(t, ss.SetSetting(ctx, store.MaintenanceSetting, nil))
		require.Eventually(t, func() bool {
			got, err := c.JobGet(ctx, job.ID)
			return err == nil && got.State == pronto.StateAvailable
		}, 15*time.Second, 10*time.Millisecond, "promoted once maintenance mode is off")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fires) >= 2 // the missed occurrence, then one skipped behind its unfinished job
		}, 15*time.Second, 10*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		inserted := 0
		for _, f := range fires {
			if f.Job != nil {
				inserted++
			}
		}
		require.Equal(t, 1, inserted, "the missed occurrences fire once: %+v", fires)
	})
}
