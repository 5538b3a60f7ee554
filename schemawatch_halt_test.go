package pronto_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// startHaltClient starts a client of one worker (for schemaWatchArgs, which return at once) on ts,
// whose schema watch reads every 20 ms; configure adjusts its config first.
func startHaltClient(t *testing.T, ts *testStore, configure func(*pronto.Config)) *pronto.Client {
	t.Helper()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[schemaWatchArgs]) error { return nil }))
	cfg := fastConfig(workers, defaultQueue(1))
	if configure != nil {
		configure(cfg)
	}
	c, err := pronto.NewClient(ts.Store, cfg)
	require.NoError(t, err)
	pronto.SetSchemaWatchEvery(c, 20*time.Millisecond)
	startBuilt(t, c)
	return c
}

// haltBySchema applies, under c, a newer migration marked incompatible with older binaries, and
// waits until c has halted for it.
func haltBySchema(t *testing.T, ts *testStore, c *pronto.Client) {
	t.Helper()
	recordNewerMigration(t, ts, "future_incompatible", false)
	require.Eventually(t, func() bool { return c.SchemaIncompatible() != nil }, 15*time.Second, 5*time.Millisecond,
		"the client did not notice the incompatible migration")
}

// requireSchemaRefusal checks that err is the halt's refusal: it matches store.ErrSchemaTooNew and
// names the migration.
func requireSchemaRefusal(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, "_future_incompatible")
}

// A halted client fetches nothing for remote workers (the OJS server's fetch): the job waiting is
// left available, its attempt unspent, and the fetch says why. Before, RemoteFetch went on claiming
// after the halt, for workers of a binary that does not know the schema.
func TestHaltedClientRefusesRemoteFetch(t *testing.T) {
	for _, batch := range []int{0, 1} { // through the fetch batcher (the default), and without it
		t.Run(map[int]string{0: "batched", 1: "unbatched"}[batch], func(t *testing.T) {
			forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
				ctx := context.Background()
				c := startHaltClient(t, ts, func(cfg *pronto.Config) { cfg.FetchBatchSize = batch })
				// A queue this client does not work: only a remote fetch claims from it.
				j, err := c.Insert(ctx, schemaWatchArgs{N: 1}, &pronto.InsertOpts{Queue: "remote"})
				require.NoError(t, err)

				haltBySchema(t, ts, c)
				jobs, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"remote"}, WorkerID: "ojs-worker"})
				requireSchemaRefusal(t, err)
				require.Empty(t, jobs)
				got, err := c.JobGet(ctx, j.ID)
				require.NoError(t, err)
				require.Equal(t, pronto.StateAvailable, got.State, "a remote worker got a job from a halted client")
				require.Zero(t, got.Attempt)
			})
		})
	}
}

// A halted leader stops maintenance and resigns, so that a newer binary's client can lead: it
// writes no more rescues, promotions or cleanups into a schema it does not know. Before, it led
// and maintained until Stop.
func TestHaltedClientStopsMaintenance(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var passes, halted, afterHalt atomic.Int64
		c := startHaltClient(t, ts, func(cfg *pronto.Config) {
			cfg.SystemHook = func(ctx context.Context, _ pronto.SystemPass) (context.Context, func(int, error)) {
				passes.Add(1)
				if halted.Load() > 0 {
					afterHalt.Add(1)
				}
				return ctx, func(int, error) {}
			}
		})
		require.Eventually(t, func() bool { return c.IsLeader() && passes.Load() > 0 }, 15*time.Second, 5*time.Millisecond,
			"the client never led maintenance")

		haltBySchema(t, ts, c)
		halted.Store(1)
		require.False(t, c.IsLeader())
		// The office is free at once: a newer client elects itself without waiting out the TTL.
		ok, err := ts.Store.Elect(ctx, "maintenance", "newer-client", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the halted client still holds maintenance leadership")
		// Rescue passes come every 100 ms while leading; none starts after the halt.
		require.Never(t, func() bool { return afterHalt.Load() > 0 }, time.Second, 20*time.Millisecond,
			"maintenance passes ran after the halt")
	})
}

// A halted client refuses inserts, each way it offers them, naming the migrations, and stores
// nothing: rows in this binary's shape might fail in the newer schema, or be read there as
// something else. Before, they were written.
func TestHaltedClientRefusesInserts(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startHaltClient(t, ts, nil)
		haltBySchema(t, ts, c)
		_, err := c.Insert(ctx, schemaWatchArgs{N: 1}, nil)
		requireSchemaRefusal(t, err)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{{Args: schemaWatchArgs{N: 2}}})
		requireSchemaRefusal(t, err)
		var fast []pronto.InsertManyParams
		for i := range 12 { // enough for PostgreSQL's fast path
			fast = append(fast, pronto.InsertManyParams{Args: schemaWatchArgs{N: i}})
		}
		n, err := c.InsertManyFast(ctx, fast)
		requireSchemaRefusal(t, err)
		require.Zero(t, n)

		switch s := ts.Store.(type) {
		case *postgres.Store:
			tx, err := s.Pool().Begin(ctx)
			require.NoError(t, err)
			_, err = c.InsertTx(ctx, tx, schemaWatchArgs{N: 3}, nil)
			requireSchemaRefusal(t, err)
			require.NoError(t, tx.Commit(ctx))
		case *sqlite.Store:
			tx, err := s.DB().BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = c.InsertSQLTx(ctx, tx, schemaWatchArgs{N: 3}, nil)
			requireSchemaRefusal(t, err)
			require.NoError(t, tx.Commit())
		}

		jobs, err := c.JobList(ctx, &pronto.JobListParams{Limit: 100})
		require.NoError(t, err)
		require.Empty(t, jobs.Jobs, "jobs were stored after the halt")
	})
}

// A halted client's cron scheduler inserts no job after the halt (an occurrence under way is
// refused) and stops, giving up the cron leadership at once, so that a client of the newer release
// fires instead. Before, cron enqueued every second into the newer schema; then it went on leading
// and firing nothing, so no other client could fire until it stopped.
func TestHaltedClientCronInsertsNothing(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startHaltClient(t, ts, func(cfg *pronto.Config) { cfg.DisableMaintenance = true })
		_, err := c.CronRegister(ctx, pronto.CronJob{Name: "halt-cron", Expression: "@every 1s", Kind: "halt.cron",
			Opts: pronto.InsertOpts{Queue: "cron-only"}, OverlapPolicy: pronto.CronAllow})
		require.NoError(t, err)

		var mu sync.Mutex
		afterHalt := map[string]bool{} // the jobs whose insert began after the halt
		var fired, firedAfter atomic.Int64
		cronCtx, stopCron := context.WithCancel(ctx)
		defer stopCron()
		cronDone := make(chan error, 1)
		go func() {
			cronDone <- c.RunCron(cronCtx, &pronto.CronConfig{
				BeforeInsert: func(jobID string) func() {
					if c.SchemaIncompatible() != nil {
						mu.Lock()
						afterHalt[jobID] = true
						mu.Unlock()
					}
					return func() {}
				},
				OnFire: func(f pronto.CronFire) {
					if f.Job == nil {
						return
					}
					fired.Add(1)
					mu.Lock()
					defer mu.Unlock()
					if afterHalt[f.Job.ID] {
						firedAfter.Add(1)
					}
				},
			})
		}()
		require.Eventually(t, func() bool { return fired.Load() > 0 }, 15*time.Second, 10*time.Millisecond, "cron never fired")

		haltBySchema(t, ts, c)
		// The scheduler stops with the halt's error, having given up its leadership: a client of the
		// newer release takes the cron over at once instead of after the leader's TTL.
		select {
		case err := <-cronDone:
			requireSchemaRefusal(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("RunCron went on after the halt")
		}
		ok, err := ts.Store.Elect(ctx, "cron", "newer-client", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the halted client still holds the cron leadership")
		require.Zero(t, firedAfter.Load(), "cron inserted jobs after the halt")
	})
}
