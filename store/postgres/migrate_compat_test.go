package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

func TestParseOlderBinaries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		up                 string
		compatible, marked bool
	}{
		{"-- adds a table\n-- older binaries: compatible\nCREATE TABLE t (x int);", true, true},
		{"  --   older binaries:   incompatible, drops jobs.kind\nALTER TABLE ...", false, true},
		{"-- older binaries: incompatible\n", false, true},
		{"-- older binaries: perhaps\n", false, false},
		{"CREATE TABLE t (x int);", false, false},
	} {
		c, m := store.ParseOlderBinaries(tc.up)
		require.Equal(t, tc.compatible, c, tc.up)
		require.Equal(t, tc.marked, m, tc.up)
	}
	for _, m := range migrations {
		if m.version > lastUnmarked {
			_, marked := store.ParseOlderBinaries(m.up)
			require.True(t, marked, "migration %03d_%s says whether older binaries may run on its schema", m.version, m.name)
		}
	}
}

// migratedOwnPool returns a store over a fresh, migrated schema, on a small pool of its own (the
// tests change the migrations table under the pool's cached statements).
func migratedOwnPool(t *testing.T) *Store {
	t.Helper()
	s, err := New(testdb.NewPool(t, 2), Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// markNewer records versions as a newer pronto applies them, with its mark.
func markNewer(t *testing.T, s *Store, ok bool, versions ...int) {
	t.Helper()
	for _, v := range versions {
		_, err := s.Pool().Exec(context.Background(), s.expand.Replace(sqlRecordMarkedMigration), v, fmt.Sprintf("future_%d", v), ok)
		require.NoError(t, err)
	}
}

// TestOlderBinaryOnNewerSchema runs the shared checks of the older-binaries marks.
func TestOlderBinaryOnNewerSchema(t *testing.T) {
	t.Parallel()
	s := migratedOwnPool(t)
	storetest.RunNewerMigrationMarks(t, s, func(version int, name string, ok bool) {
		_, err := s.Pool().Exec(context.Background(), s.expand.Replace(sqlRecordMarkedMigration), version, name, ok)
		require.NoError(t, err)
	})
	_, err := s.Insert(context.Background(), []*store.InsertParams{params("q")})
	require.NoError(t, err, "a newer migration refused at start does not stop the store itself")
}

// TestOldBinaryReadsMarks: a binary of an older release (one knowing all migrations but the newest
// two) reads the marks this binary recorded when it applied them: it runs when both are marked
// compatible, and refuses when either is not.
func TestOldBinaryReadsMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := migratedOwnPool(t)
	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	n := len(status)
	old := status[:n-2] // what the older release embeds

	newer, err := s.appliedAfter(ctx, old[len(old)-1].Version)
	require.NoError(t, err)
	require.Len(t, newer, 2)
	for i, m := range newer {
		require.Equal(t, migrations[n-2+i].version, m.Version)
		require.Equal(t, migrations[n-2+i].olderOK, m.OlderOK, "the mark recorded is the migration's own")
	}

	_, err = s.Pool().Exec(ctx, s.expand.Replace(`UPDATE {schema}.schema_migrations SET older_binaries_ok = true WHERE version > $1`), n-2)
	require.NoError(t, err)
	newer, err = s.appliedAfter(ctx, n-2)
	require.NoError(t, err)
	require.NoError(t, store.CheckNewer("here", old, newer))

	_, err = s.Pool().Exec(ctx, s.expand.Replace(`UPDATE {schema}.schema_migrations SET older_binaries_ok = false WHERE version = $1`), n)
	require.NoError(t, err)
	newer, err = s.appliedAfter(ctx, n-2)
	require.NoError(t, err)
	err = store.CheckNewer("here", old, newer)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, fmt.Sprintf("%03d_%s", n, migrations[n-1].name))
	require.NotContains(t, err.Error(), fmt.Sprintf("%03d_%s;", n-1, migrations[n-2].name), "the compatible one is not named incompatible")
}

// TestMarksOnLegacyMigrationsTable: a schema whose migrations table was created by a binary that
// predates the marks has no column for them: a migration recorded there unmarked is refused, and the
// next Migrate adds the column.
func TestMarksOnLegacyMigrationsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := migratedOwnPool(t)
	_, err := s.Pool().Exec(ctx, s.expand.Replace(`ALTER TABLE {schema}.schema_migrations DROP COLUMN older_binaries_ok`))
	require.NoError(t, err)
	_, err = s.Pool().Exec(ctx, s.expand.Replace(`INSERT INTO {schema}.schema_migrations (version, name) VALUES (999, 'future')`))
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, "999_future")

	_, err = s.Pool().Exec(ctx, s.expand.Replace(`DELETE FROM {schema}.schema_migrations WHERE version = 999`))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	markNewer(t, s, true, 999)
	require.NoError(t, s.CheckSchema(ctx))
	require.False(t, errors.Is(s.CheckSchema(ctx), store.ErrSchemaTooNew))
}
