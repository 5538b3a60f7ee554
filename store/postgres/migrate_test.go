package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

func TestMigrateUpDownStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	// A pool of its own: dropping and recreating tables invalidates cached statements.
	s, err := New(testdb.NewPool(t, 2), Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Len(t, status, len(migrations))
	for i, m := range status {
		require.Equal(t, migrations[i].version, m.Version)
		require.Equal(t, i+1, m.Version, "migrations are numbered 1, 2, 3, ... without gaps")
		require.NotEmpty(t, m.Name)
		require.False(t, m.Applied)
	}

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "a second Migrate has nothing to do")
	status, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range status {
		require.True(t, m.Applied, "migration %d", m.Version)
		require.False(t, m.AppliedAt.IsZero())
	}
	_, err = s.Insert(ctx, []*store.InsertParams{params("q")})
	require.NoError(t, err)

	require.NoError(t, s.MigrateDown(ctx, 1))
	status, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.True(t, status[0].Applied)
	require.False(t, status[len(status)-1].Applied)
	require.NoError(t, s.Migrate(ctx))

	require.NoError(t, s.MigrateDown(ctx, len(migrations)+5))
	status, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range status {
		require.False(t, m.Applied, "migration %d", m.Version)
	}
	var tables int
	require.NoError(t, s.Pool().QueryRow(ctx,
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name <> 'schema_migrations'`,
		schema).Scan(&tables))
	require.Zero(t, tables, "down migrations drop every table")

	require.NoError(t, s.Migrate(ctx))
	jobs, _, err := s.ListJobs(ctx, store.ListParams{})
	require.NoError(t, err)
	require.Empty(t, jobs, "the jobs table was recreated empty")
	_, err = s.Insert(ctx, []*store.InsertParams{params("q")})
	require.NoError(t, err)
}

func TestMigrateCreatesSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t) // dropped at the end; not created by testdb
	s := newStore(t, testdb.Pool(t), schema)
	_, err := s.Insert(ctx, []*store.InsertParams{params("q")})
	require.NoError(t, err)
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	const clients = 6
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		s, err := New(testdb.NewPool(t, 2), Config{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var applied int
	require.NoError(t, testdb.Pool(t).QueryRow(ctx, `SELECT count(*) FROM `+schema+`.schema_migrations`).Scan(&applied))
	require.Equal(t, len(migrations), applied)
}

func TestTwoSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)
	a := newStore(t, pool, testdb.Schema(t))
	b := newStore(t, pool, testdb.Schema(t))
	require.NotEqual(t, a.Channel(), b.Channel())
	recA, recB := subscribe(t, a), subscribe(t, b)

	_, err := a.Insert(ctx, []*store.InsertParams{params("shared")})
	require.NoError(t, err)
	require.NoError(t, a.PauseQueue(ctx, "other"))

	jobs, err := b.Claim(ctx, claimParams("shared", 10))
	require.NoError(t, err)
	require.Empty(t, jobs, "b sees none of a's jobs")
	queues, err := b.ListQueues(ctx)
	require.NoError(t, err)
	require.Empty(t, queues)

	jobs, err = a.Claim(ctx, claimParams("shared", 10))
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	_, err = b.Insert(ctx, []*store.InsertParams{params("shared"), params("shared")})
	require.NoError(t, err)

	waitFor(t, func() bool { return len(recA.of(store.NotifyInsert)) == 1 && len(recB.of(store.NotifyInsert)) == 1 })
	waitFor(t, func() bool { return len(recA.of(store.NotifyPause)) == 1 })
	settle()
	require.Len(t, recA.of(store.NotifyInsert), 1)
	require.Len(t, recB.of(store.NotifyInsert), 1)
	require.Empty(t, recB.of(store.NotifyPause))
}

// TestCheckSchema: missing migrations are named, unknown applied ones say the schema is newer.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	s, err := New(testdb.NewPool(t, 2), Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaNotMigrated)
	require.EqualError(t, err, fmt.Sprintf(`schema not migrated: run pronto migrate up (PostgreSQL schema %q has none of pronto's %d migrations)`,
		schema, len(migrations)))

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.CheckSchema(ctx))

	require.NoError(t, s.MigrateDown(ctx, 1))
	last := migrations[len(migrations)-1]
	err = s.CheckSchema(ctx)
	var se *store.SchemaError
	require.ErrorAs(t, err, &se)
	require.Len(t, se.Missing, 1)
	require.ErrorContains(t, err, fmt.Sprintf("lacks 1 of %d migrations: %03d_%s", len(migrations), last.version, last.name))

	require.NoError(t, s.Migrate(ctx))
	_, err = s.Pool().Exec(ctx, "INSERT INTO "+schema+".schema_migrations (version, name) VALUES (999, 'future')")
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.False(t, errors.Is(err, store.ErrSchemaNotMigrated))
	require.ErrorContains(t, err, "schema is newer than this binary")
	require.ErrorContains(t, err, "999")

	// This binary reverts nothing under a newer binary's migration, which may depend on its own.
	require.ErrorIs(t, s.MigrateDown(ctx, 1), store.ErrSchemaTooNew)
	ms, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range ms {
		require.True(t, m.Applied, "migration %03d_%s is still applied", m.Version, m.Name)
	}
}

// TestApplyAndRevertMigrationsReportTheirOwnWork runs the shared report checks on a fresh schema.
func TestApplyAndRevertMigrationsReportTheirOwnWork(t *testing.T) {
	t.Parallel()
	s, err := New(testdb.NewPool(t, 2), Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	storetest.RunMigrationReports(t, s)
}
