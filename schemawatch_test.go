package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// The stores with a versioned schema are watched by started clients.
var (
	_ store.NewerMigrationsReader = (*postgres.Store)(nil)
	_ store.NewerMigrationsReader = (*sqlite.Store)(nil)
)

type schemaWatchArgs struct {
	N int `json:"n"`
}

func (schemaWatchArgs) Kind() string { return "test.schema_watch" }

// recordNewerMigration records, in ts's migrations table, the migration after the newest this
// binary knows as a newer pronto applying it would, with its mark (olderOK: compatible with older
// binaries).
func recordNewerMigration(t *testing.T, ts *testStore, name string, olderOK bool) {
	t.Helper()
	ctx := context.Background()
	ms, err := ts.Store.(interface {
		MigrationStatus(context.Context) ([]store.Migration, error)
	}).MigrationStatus(ctx)
	require.NoError(t, err)
	version := ms[len(ms)-1].Version + 1
	switch s := ts.Store.(type) {
	case *postgres.Store:
		_, err = s.Pool().Exec(ctx, fmt.Sprintf(`INSERT INTO %s.schema_migrations (version, name, older_binaries_ok) VALUES ($1, $2, $3)`,
			ts.schema), version, name, olderOK)
	case *sqlite.Store:
		_, err = s.DB().ExecContext(ctx,
			`INSERT INTO pronto_migrations (version, name, applied_at, older_binaries_ok) VALUES (?, ?, 0, ?)`, version, name, olderOK)
	default:
		t.Fatalf("no migrations table in %T", s)
	}
	require.NoError(t, err)
}

// startWatchedClient starts a client of one worker on ts whose schema watch reads every 20 ms; the
// worker waits on gate for job N 1.
func startWatchedClient(t *testing.T, ts *testStore, running chan<- int, gate <-chan struct{}) *pronto.Client {
	t.Helper()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[schemaWatchArgs]) error {
		running <- j.Args.N
		if j.Args.N == 1 {
			<-gate
		}
		return nil
	}))
	c, err := pronto.NewClient(ts.Store, fastConfig(workers, defaultQueue(2)))
	require.NoError(t, err)
	pronto.SetSchemaWatchEvery(c, 20*time.Millisecond)
	startBuilt(t, c)
	return c
}

// A started client stops claiming once a migration it does not know, marked incompatible with
// older binaries, is applied under it (pronto migrate up --force, or Store.Migrate): its running job
// finishes and is recorded, a job inserted after is left available, it says so (error event, Stats,
// SchemaIncompatible) naming the migration. (What else the halt stops: schemawatch_halt_test.go.) Before, it claimed and ran on as if nothing happened.
func TestRunningClientStopsClaimingOnIncompatibleMigration(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		running := make(chan int, 10)
		gate := make(chan struct{})
		c := startWatchedClient(t, ts, running, gate)
		events, unsub := c.Subscribe(pronto.EventSchemaIncompatible)
		defer unsub()

		a, err := c.Insert(ctx, schemaWatchArgs{N: 1}, nil)
		require.NoError(t, err)
		select {
		case n := <-running:
			require.Equal(t, 1, n)
		case <-time.After(15 * time.Second):
			t.Fatal("job 1 never started")
		}

		recordNewerMigration(t, ts, "future_incompatible", false)
		var ev *pronto.Event
		select {
		case ev = <-events:
		case <-time.After(15 * time.Second):
			t.Fatal("no schema.incompatible event: the client did not notice the incompatible migration")
		}
		require.Equal(t, pronto.EventSchemaIncompatible, ev.Kind)
		require.ErrorIs(t, ev.Err, store.ErrSchemaTooNew)
		require.ErrorContains(t, ev.Err, "_future_incompatible")
		require.Eventually(t, func() bool { return c.SchemaIncompatible() != nil }, 15*time.Second, 5*time.Millisecond)
		require.ErrorIs(t, c.SchemaIncompatible(), store.ErrSchemaTooNew)
		require.False(t, c.Stats().Started, "health checks read Started")

		// The job that was running finishes, and its outcome is written.
		close(gate)
		waitState(t, c, a.ID, pronto.StateCompleted)

		// A job inserted now (as a newer binary would: this one, and any client of this binary, refuses
		// inserts) is not worked: not while the client lives, nor as it stops.
		b := &store.InsertParams{ID: uuidv7.New(), Kind: schemaWatchArgs{}.Kind(), Queue: pronto.DefaultQueue,
			Args: json.RawMessage(`{"n":2}`), State: store.StateAvailable, MaxAttempts: 3}
		_, err = ts.Store.Insert(ctx, []*store.InsertParams{b})
		require.NoError(t, err)
		require.Never(t, func() bool { return len(running) > 0 }, time.Second, 20*time.Millisecond,
			"job 2 ran on a schema the client does not know")
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, c.Stop(stopCtx))
		got, err := c.JobGet(ctx, b.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, got.State)
		// Given back unstarted (perhaps through the store's hand-off to the stopped producer's
		// lingering advertisement): a spent attempt is refunded, so the job keeps its whole budget.
		require.Equal(t, b.MaxAttempts, got.MaxAttempts-got.Attempt, "job 2 lost budget without running")
		require.Empty(t, running, "job 2 ran")
	})
}

// A newer migration marked compatible with older binaries changes nothing for a running client.
func TestRunningClientWorksOnCompatibleMigration(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		running := make(chan int, 10)
		gate := make(chan struct{})
		close(gate)
		c := startWatchedClient(t, ts, running, gate)

		recordNewerMigration(t, ts, "future_compatible", true)
		// Two reads after the row was written: at least one of them saw it.
		seen := pronto.SchemaWatchPasses(c) + 2
		require.Eventually(t, func() bool { return pronto.SchemaWatchPasses(c) >= seen }, 15*time.Second, 5*time.Millisecond)

		j, err := c.Insert(ctx, schemaWatchArgs{N: 2}, nil)
		require.NoError(t, err)
		waitState(t, c, j.ID, pronto.StateCompleted)
		require.NoError(t, c.SchemaIncompatible())
		require.True(t, c.Stats().Started)
	})
}
