package cli

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestMigrateDownRefusesDataLoss: a rollback that would delete jobs or rate limits is refused,
// naming what it would delete, and changes nothing; --force rolls back and says what went.
func TestMigrateDownRefusesDataLoss(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		if schemaless(db) {
			require.Contains(t, run(t, with(db, "migrate", "down", "--all")...).ok(t).stdout, "nothing to migrate")
			return
		}
		run(t, with(db, "enqueue", "a.b")...).ok(t)
		res := run(t, with(db, "migrate", "down", "--all")...).fails(t, ExitError, "refusing to roll back")
		require.Regexp(t, `it would delete 1 row of table (pronto_)?jobs \(001_`, res.stderr)
		require.Contains(t, res.stderr, "keep a copy of what you need, or pass --force to roll back anyway")
		require.Contains(t, run(t, with(db, "migrate", "status")...).ok(t).stdout, "up to date", "nothing was rolled back")

		run(t, with(db, "rate-limits", "set", "partner-api", "--max-active", "3")...).ok(t)
		res = run(t, with(db, "migrate", "down", "--all")...).fails(t, ExitError, "refusing to roll back")
		require.Regexp(t, `1 row of table (pronto_)?rate_limits \(\d+_features\)`, res.stderr)
		require.Regexp(t, `1 row of table (pronto_)?jobs \(001_`, res.stderr)

		out := run(t, with(db, "migrate", "down", "--all", "--force")...).ok(t).stdout
		require.Contains(t, out, "with --force: it would delete 1 row of table")
		require.Contains(t, out, "rolled back")
		require.Contains(t, out, ": 0 of ")
	})
}

// liveArgs is the kind the live clients of TestMigrateDownRefusesWhileClientsLive work.
type liveArgs struct{}

func (liveArgs) Kind() string { return "test.live" }

// TestMigrateDownRefusesWhileClientsLive: a rollback, even one that deletes nothing, is refused
// while a client uses the schema: on SQLite seen by its leader lease, on PostgreSQL (with the
// client's maintenance disabled, so it holds no lease) by its presence announcements.
func TestMigrateDownRefusesWhileClientsLive(t *testing.T) {
	ctx := context.Background()
	startClient := func(t *testing.T, s store.Store, cfg *pronto.Config) {
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[liveArgs]) error { return nil }))
		cfg.Workers = workers
		cfg.Queues = map[string]pronto.QueueConfig{"default": {MaxWorkers: 1}}
		c, err := pronto.NewClient(s, cfg)
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_ = c.Stop(stopCtx)
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "pronto.db")
		db := []string{"--database-url", "sqlite:" + path}
		run(t, with(db, "migrate", "up")...).ok(t)
		s, err := sqlite.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		startClient(t, s, &pronto.Config{ID: "live-one"})
		require.Eventually(t, func() bool {
			leases, err := s.LiveLeases(ctx)
			return err == nil && len(leases) > 0
		}, 10*time.Second, 10*time.Millisecond, "the client takes the maintenance lease")
		res := run(t, with(db, "migrate", "down")...).fails(t, ExitError, "refusing to roll back")
		require.Contains(t, res.stderr, "clients are using the schema: client live-one (leader of maintenance); stop the clients, or pass --force")
		require.NotContains(t, res.stderr, "would delete")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		schema := testdb.Schema(t)
		db := []string{"--database-url", testdb.URL(), "--schema", schema}
		run(t, with(db, "migrate", "up")...).ok(t)
		pool, err := pgxpool.New(ctx, testdb.URL())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, postgres.Config{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		startClient(t, s, &pronto.Config{ID: "live-two", DisableMaintenance: true})
		res := run(t, with(db, "migrate", "down")...).fails(t, ExitError, "refusing to roll back")
		require.Contains(t, res.stderr, "clients are using the schema: client live-two (working queue default)")
	})
}

// TestSchemaNewerThanBinary: every command refuses a schema migrated by a newer pronto.
func TestSchemaNewerThanBinary(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "pronto.db")
	db := []string{"--database-url", "sqlite:" + path}
	run(t, with(db, "migrate", "up")...).ok(t)
	s, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	_, err = s.DB().Exec(`INSERT INTO pronto_migrations (version, name, applied_at) VALUES (999, 'future', 0)`)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	run(t, with(db, "jobs", "list")...).fails(t, ExitError, "is newer than this binary")
	for _, cmd := range [][]string{{"migrate", "up"}, {"migrate", "down"}, {"migrate", "down", "--all", "--force"}, {"migrate", "status"}} {
		run(t, with(db, cmd...)...).fails(t, ExitError, "migration(s) 999 applied, which this version of pronto does not know")
	}
	// Nothing was reverted under the newer migration, nor by the store itself when asked directly.
	s, err = sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.MigrateDown(context.Background(), 1), store.ErrSchemaTooNew)
	ms, err := s.MigrationStatus(context.Background())
	require.NoError(t, err)
	for _, m := range ms {
		require.True(t, m.Applied, "migration %03d_%s is still applied", m.Version, m.Name)
	}
}
