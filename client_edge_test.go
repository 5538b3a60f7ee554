package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertTypedNilArgs: a nil pointer as args is refused with ErrInvalidArgs, not a panic from
// calling Kind on it.
func TestInsertTypedNilArgs(t *testing.T) {
	t.Parallel()
	c, err := pronto.NewClient(newTestStore(t, kindMemory).Store, nil)
	require.NoError(t, err)
	var args *echoArgs
	_, err = c.Insert(context.Background(), args, nil)
	require.ErrorIs(t, err, pronto.ErrInvalidArgs)
	require.ErrorContains(t, err, "args are a nil *pronto_test.echoArgs")
	_, err = c.InsertMany(context.Background(), []pronto.InsertManyParams{{Args: echoArgs{}}, {Args: args}})
	require.ErrorIs(t, err, pronto.ErrInvalidArgs)
}

// TestSubMillisecondTimeout: stores keep timeouts in whole milliseconds, so a fraction rounds up
// rather than down to 0, which would mean no timeout; every store keeps the same value.
func TestSubMillisecondTimeout(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		for give, want := range map[time.Duration]time.Duration{
			900 * time.Microsecond:                           time.Millisecond,
			1500 * time.Microsecond:                          2 * time.Millisecond,
			3 * time.Millisecond:                             3 * time.Millisecond,
			time.Second + time.Nanosecond:                    time.Second + time.Millisecond,
			time.Hour + 999*time.Microsecond + 1:             time.Hour + time.Millisecond,
			time.Minute + time.Millisecond - time.Nanosecond: time.Minute + time.Millisecond,
		} {
			j, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Timeout: give})
			require.NoError(t, err)
			require.Equal(t, want, j.Timeout, "Insert's row for a timeout of %s", give)
			got, err := c.JobGet(ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, want, got.Timeout, "the stored timeout for %s", give)
		}
	})
}

// TestFarFutureTimes: a ScheduledAt or ExpiresAt after LatestTime is refused alike on every store
// (SQLite and Redis overflowed it into the past and ran the job at once; PostgreSQL failed with an
// untyped error); LatestTime itself is kept.
func TestFarFutureTimes(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		far := time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err = c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{ScheduledAt: far})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.ErrorContains(t, err, "ScheduledAt")
		_, err = c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{ExpiresAt: pronto.LatestTime.Add(time.Second)})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.ErrorContains(t, err, "ExpiresAt")

		j, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{ScheduledAt: pronto.LatestTime, ExpiresAt: pronto.LatestTime})
		require.NoError(t, err)
		got, err := c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateScheduled, got.State)
		require.True(t, got.ScheduledAt.Equal(pronto.LatestTime), "stored scheduled_at %s", got.ScheduledAt)
		require.True(t, got.ExpiresAt.Equal(pronto.LatestTime), "stored expires_at %s", got.ExpiresAt)
	})
}

// TestStopDoneContextNoJobs: Stop with a done context returns nil when no job had to be
// cancelled (a done ctx used to win the race against the jobs' wait group every time).
func TestStopDoneContextNoJobs(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t, kindMemory)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error { return nil }))
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		cfg := fastConfig(workers, defaultQueue(1))
		cfg.DisableMaintenance = true
		c, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		require.NoError(t, c.Stop(done), "no job was running, so none was cancelled")
	}
}

// TestNegativeIntervalsRefused: NewClient refuses negative durations, which reached
// time.NewTicker in a goroutine at Start and crashed the process.
func TestNegativeIntervalsRefused(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t, kindMemory)
	for name, set := range map[string]func(*pronto.Config){
		"LeaseDuration":     func(c *pronto.Config) { c.LeaseDuration = -time.Second },
		"HeartbeatInterval": func(c *pronto.Config) { c.HeartbeatInterval = -time.Second },
		"PollInterval":      func(c *pronto.Config) { c.PollInterval = -time.Second },
		"RescueInterval":    func(c *pronto.Config) { c.RescueInterval = -time.Second },
		"LeaderTTL":         func(c *pronto.Config) { c.LeaderTTL = -time.Second },
		"JobTimeout":        func(c *pronto.Config) { c.JobTimeout = -time.Second },
	} {
		cfg := &pronto.Config{}
		set(cfg)
		_, err := pronto.NewClient(ts.Store, cfg)
		require.ErrorContains(t, err, name+" (-1s) is negative")
	}
}
