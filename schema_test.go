package pronto_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// unmigratedStores returns a PostgreSQL store over an empty schema and an SQLite store over an
// empty file, neither migrated.
func unmigratedStores(t *testing.T) map[string]store.Store {
	t.Helper()
	pg, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	lite, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lite.Close() })
	return map[string]store.Store{"postgres": pg, "sqlite": lite}
}

// TestStartRefusesUnmigratedSchema: Start fails with the schema error instead of starting a client
// whose every claim then fails in the (discarded) logger.
func TestStartRefusesUnmigratedSchema(t *testing.T) {
	for name, s := range unmigratedStores(t) {
		t.Run(name, func(t *testing.T) {
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[echoArgs]) error { return nil }))
			c, err := pronto.NewClient(s, fastConfig(workers, defaultQueue(1)))
			require.NoError(t, err)
			err = c.Start(context.Background())
			require.ErrorIs(t, err, store.ErrSchemaNotMigrated)
			require.ErrorContains(t, err, "schema not migrated: run pronto migrate up")
			require.NoError(t, c.Stop(context.Background()), "a client that did not start stops at once")

			// Migrated, a new client starts.
			require.NoError(t, s.Migrate(context.Background()))
			c = startClient(t, s, fastConfig(workers, defaultQueue(1)))
			_, err = c.Insert(context.Background(), echoArgs{}, nil)
			require.NoError(t, err)
		})
	}
}

// TestInsertOnlyClientNamesUnmigratedSchema: a client that is never started and inserts gets the
// schema error, not the driver's "relation does not exist" or "no such table".
func TestInsertOnlyClientNamesUnmigratedSchema(t *testing.T) {
	for name, s := range unmigratedStores(t) {
		t.Run(name, func(t *testing.T) {
			c, err := pronto.NewClient(s, nil)
			require.NoError(t, err)
			_, err = c.Insert(context.Background(), echoArgs{}, nil)
			require.ErrorIs(t, err, store.ErrSchemaNotMigrated)
			require.ErrorContains(t, err, "schema not migrated: run pronto migrate up")
			require.NotContains(t, err.Error(), "does not exist")
			require.NotContains(t, err.Error(), "no such table")
			_, err = c.WorkflowInsert(context.Background(), pronto.NewChain("c", pronto.WorkflowJob{Args: echoArgs{}}))
			require.ErrorIs(t, err, store.ErrSchemaNotMigrated)

			// Once migrated, inserts work, and a later failure is reported as it is.
			require.NoError(t, s.Migrate(context.Background()))
			_, err = c.Insert(context.Background(), echoArgs{}, nil)
			require.NoError(t, err)
			_, err = c.Insert(context.Background(), echoArgs{}, &pronto.InsertOpts{Queue: "Bad Queue"})
			require.Error(t, err)
			require.False(t, errors.Is(err, store.ErrSchemaNotMigrated))
		})
	}
}
