package pronto_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

func TestParseCron(t *testing.T) {
	s, err := pronto.ParseCron("0 9 * * *", "Asia/Tokyo")
	require.NoError(t, err)
	next := s.Next(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(24*time.Hour), next, "09:00 in Tokyo is 00:00 UTC")
	for _, expr := range []string{"*/5 * * * *", "@daily", "@hourly", "@weekly", "@every 30s", "0 30 2 * * *", "0 0 1 JAN MON"} {
		_, err := pronto.ParseCron(expr, "")
		require.NoError(t, err, expr)
	}
	for _, bad := range []struct{ expr, tz string }{
		{"not a valid cron", ""}, {"0 0 0 0 0 0 0", ""}, {"99 25 32 13 8", ""}, {"", ""}, {"@every 1ms", ""},
		{"* * * * *", "EST"}, {"* * * * *", "+05:00"}, {"* * * * *", "Mars/Olympus"}, {"TZ=UTC * * * * *", ""},
	} {
		_, err := pronto.ParseCron(bad.expr, bad.tz)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, "%q %q", bad.expr, bad.tz)
	}
}

func TestCronRegistration(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		j, err := c.CronRegister(ctx, pronto.CronJob{
			Name: "nightly-report", Expression: "30 2 * * *", Timezone: "America/New_York",
			Kind: "report.build", Args: json.RawMessage(`[{"period":"day"}]`),
			Opts: pronto.InsertOpts{Queue: "reports", Priority: 5, Meta: map[string]any{"team": "data"}},
		})
		require.NoError(t, err)
		require.Equal(t, pronto.CronSkip, j.OverlapPolicy)
		require.True(t, j.NextRunAt.After(time.Now()))
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "nightly-report", Expression: "@daily", Kind: "a.b"})
		require.ErrorIs(t, err, pronto.ErrDuplicate)
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "Bad Name", Expression: "@daily", Kind: "a.b"})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "x", Expression: "@daily", Kind: "a.b", Opts: pronto.InsertOpts{Delay: time.Second}})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)

		got, err := c.CronGet(ctx, "nightly-report")
		require.NoError(t, err)
		require.Equal(t, "reports", got.Opts.Queue)
		require.Equal(t, 5, got.Opts.Priority)
		require.Equal(t, "data", got.Opts.Meta["team"])
		list, err := c.CronList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		del, err := c.CronDelete(ctx, "nightly-report")
		require.NoError(t, err)
		require.Equal(t, "nightly-report", del.Name)
		_, err = c.CronGet(ctx, "nightly-report")
		require.ErrorIs(t, err, pronto.ErrNotFound)
	})
}

// Two schedulers on one store, as two processes would run them: each occurrence is fired once, and
// the skip policy holds back occurrences while the previous job is unfinished.
func TestRunCronFiresOnceAndSkips(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var fires []pronto.CronFire
		cfg := &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
			mu.Lock()
			fires = append(fires, f)
			mu.Unlock()
		}}
		a := startClient(t, ts.reopen(t), &pronto.Config{LeaderTTL: time.Second})
		b := startClient(t, ts.reopen(t), &pronto.Config{LeaderTTL: time.Second})
		_, err := a.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1s", Kind: "cron.tick", Opts: pronto.InsertOpts{Queue: "ticks"}})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for _, c := range []*pronto.Client{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				require.NoError(t, c.RunCron(ctx, cfg))
			}()
		}
		// The first occurrence inserts a job; while it is unfinished the next ones are skipped.
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fires) >= 3
		}, 15*time.Second, 50*time.Millisecond)
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		inserted := 0
		for _, f := range fires {
			if f.Job != nil {
				inserted++
				require.Equal(t, "tick", f.Name)
				var meta map[string]any
				require.NoError(t, json.Unmarshal(f.Job.Meta, &meta))
				require.Equal(t, "tick", meta["cron_name"])
			} else {
				require.True(t, f.Skipped)
				require.NotEmpty(t, f.PreviousJobID)
			}
		}
		require.Equal(t, 1, inserted, "one job while the first is unfinished: %+v", fires)
		list, err := a.JobList(context.Background(), &pronto.JobListParams{Queues: []string{"ticks"}})
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1)
		reg, err := a.CronGet(context.Background(), "tick")
		require.NoError(t, err)
		require.Equal(t, int64(1), reg.RunCount)
		require.Equal(t, list.Jobs[0].ID, reg.LastJobID)
	})
}

// A template's unique policy holds across occurrences: with the allow overlap policy, an occurrence
// whose job would duplicate the unfinished previous one is skipped by the unique index instead.
func TestRunCronUniqueTemplate(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var fires []pronto.CronFire
		cfg := &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
			mu.Lock()
			fires = append(fires, f)
			mu.Unlock()
		}}
		c := startClient(t, ts.Store, &pronto.Config{LeaderTTL: time.Second})
		_, err := c.CronRegister(ctx, pronto.CronJob{Name: "sync", Expression: "@every 1s", Kind: "cron.sync",
			OverlapPolicy: pronto.CronAllow,
			Opts:          pronto.InsertOpts{Queue: "syncs", Unique: &pronto.UniqueOpts{}, RateKey: "sync-api"}})
		require.NoError(t, err)
		reg, err := c.CronGet(ctx, "sync")
		require.NoError(t, err)
		require.NotNil(t, reg.Opts.Unique, "the unique policy is kept")
		require.Equal(t, "sync-api", reg.Opts.RateKey)
		done := make(chan error, 1)
		go func() { done <- c.RunCron(ctx, cfg) }()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(fires) >= 3
		}, 15*time.Second, 50*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		var first string
		for i, f := range fires {
			if i == 0 {
				require.NotNil(t, f.Job, "the first occurrence inserts")
				require.Equal(t, "sync-api", f.Job.RateKey)
				first = f.Job.ID
				continue
			}
			require.True(t, f.Skipped, "later occurrences are refused by the unique policy: %+v", f)
			require.Equal(t, first, f.PreviousJobID)
		}
		list, err := c.JobList(context.Background(), &pronto.JobListParams{Queues: []string{"syncs"}})
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1)
	})
}

// A paused schedule is never due; resumed, it starts from its next occurrence after now, not the ones
// it missed.
func TestCronPauseResume(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		_, err := c.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1h", Kind: "a.b"})
		require.NoError(t, err)
		due := func() int {
			ss, err := ts.Store.(store.CronStore).CronDue(ctx, time.Now().Add(48*time.Hour), 0)
			require.NoError(t, err)
			return len(ss)
		}
		require.Equal(t, 1, due())

		j, err := c.CronPause(ctx, "tick")
		require.NoError(t, err)
		require.True(t, j.Paused)
		require.Equal(t, 0, due(), "a paused schedule is never due")
		got, err := c.CronGet(ctx, "tick")
		require.NoError(t, err)
		require.True(t, got.Paused)

		before := time.Now()
		j, err = c.CronResume(ctx, "tick")
		require.NoError(t, err)
		require.False(t, j.Paused)
		require.True(t, j.NextRunAt.After(before), "resumed from its next occurrence after now")
		require.Equal(t, 1, due())
		again, err := c.CronResume(ctx, "tick")
		require.NoError(t, err)
		require.Equal(t, j.NextRunAt, again.NextRunAt, "resuming a running schedule changes nothing")

		_, err = c.CronPause(ctx, "nope")
		require.ErrorIs(t, err, pronto.ErrNotFound)
		_, err = c.CronResume(ctx, "nope")
		require.ErrorIs(t, err, pronto.ErrNotFound)
	})
}
