package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

func TestEveryNewMigrationIsMarked(t *testing.T) {
	t.Parallel()
	ms, err := loadMigrations()
	require.NoError(t, err, "every migration after %03d says whether older binaries may run on its schema", lastUnmarked)
	for _, m := range ms {
		if m.version > lastUnmarked {
			_, marked := store.ParseOlderBinaries(m.up)
			require.True(t, marked, "migration %03d_%s", m.version, m.name)
		}
	}
	c, marked := store.ParseOlderBinaries("-- adds an index\n  --  older binaries:  incompatible, rewrites state\nCREATE INDEX ...")
	require.True(t, marked)
	require.False(t, c)
	c, marked = store.ParseOlderBinaries("-- older binaries: compatible\n")
	require.True(t, marked)
	require.True(t, c)
	_, marked = store.ParseOlderBinaries("CREATE TABLE t (x INTEGER);")
	require.False(t, marked)
}

// recordNewer records versions as a newer pronto applies them, with its mark.
func recordNewer(t *testing.T, s *Store, ok bool, versions ...int) {
	t.Helper()
	for _, v := range versions {
		_, err := s.w.ExecContext(context.Background(),
			`INSERT INTO pronto_migrations (version, name, applied_at, older_binaries_ok) VALUES (?, ?, 0, ?)`,
			v, fmt.Sprintf("future_%d", v), ok)
		require.NoError(t, err)
	}
}

// TestOlderBinaryOnNewerSchema runs the shared checks of the older-binaries marks.
func TestOlderBinaryOnNewerSchema(t *testing.T) {
	t.Parallel()
	s := openAt(t, filepath.Join(t.TempDir(), "pronto.db"))
	storetest.RunNewerMigrationMarks(t, s, func(version int, name string, ok bool) {
		_, err := s.w.ExecContext(context.Background(),
			`INSERT INTO pronto_migrations (version, name, applied_at, older_binaries_ok) VALUES (?, ?, 0, ?)`, version, name, ok)
		require.NoError(t, err)
	})
}

// TestOldBinaryReadsMarks: a binary of an older release (one knowing all migrations but the newest
// two) reads the marks this binary recorded when it applied them, and runs or refuses by them.
func TestOldBinaryReadsMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "pronto.db"))
	ms, err := loadMigrations()
	require.NoError(t, err)
	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	n := len(status)
	old := status[:n-2]

	newer, err := s.appliedAfter(ctx, n-2)
	require.NoError(t, err)
	require.Len(t, newer, 2)
	for i, m := range newer {
		require.Equal(t, ms[n-2+i].version, m.Version)
		require.Equal(t, ms[n-2+i].olderOK, m.OlderOK, "the mark recorded is the migration's own")
	}

	_, err = s.w.ExecContext(ctx, `UPDATE pronto_migrations SET older_binaries_ok = 1 WHERE version > ?`, n-2)
	require.NoError(t, err)
	newer, err = s.appliedAfter(ctx, n-2)
	require.NoError(t, err)
	require.NoError(t, store.CheckNewer("here", old, newer))

	_, err = s.w.ExecContext(ctx, `UPDATE pronto_migrations SET older_binaries_ok = 0 WHERE version = ?`, n)
	require.NoError(t, err)
	newer, err = s.appliedAfter(ctx, n-2)
	require.NoError(t, err)
	err = store.CheckNewer("here", old, newer)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, fmt.Sprintf("older binaries: %03d_%s;", n, ms[n-1].name))
}

// TestMarksOnLegacyMigrationsTable: a file whose migrations table was created by a binary that
// predates the marks has no column for them: a migration recorded there unmarked is refused, and
// the next Migrate adds the column.
func TestMarksOnLegacyMigrationsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "pronto.db"))
	_, err := s.w.ExecContext(ctx, `ALTER TABLE pronto_migrations DROP COLUMN older_binaries_ok`)
	require.NoError(t, err)
	_, err = s.w.ExecContext(ctx, `INSERT INTO pronto_migrations (version, name, applied_at) VALUES (999, 'future', 0)`)
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, "999_future")

	_, err = s.w.ExecContext(ctx, `DELETE FROM pronto_migrations WHERE version = 999`)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	recordNewer(t, s, true, 999)
	require.NoError(t, s.CheckSchema(ctx))
}

// TestNewerMigrationsOnEveryTable: NewerMigrations, one statement whatever the table, answers none
// on a file never migrated, splits by mark on a migrated one, and counts every newer migration
// incompatible on a table of a binary that predates the marks.
func TestNewerMigrationsOnEveryTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "pronto.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	versions := func() (compatible, incompatible []int) {
		t.Helper()
		c, i, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		for _, m := range c {
			compatible = append(compatible, m.Version)
		}
		for _, m := range i {
			incompatible = append(incompatible, m.Version)
		}
		return compatible, incompatible
	}
	c, i := versions()
	require.Empty(t, c, "a file never migrated has no newer migrations")
	require.Empty(t, i)
	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.False(t, status[0].Applied)

	require.NoError(t, s.Migrate(ctx))
	recordNewer(t, s, true, 998)
	recordNewer(t, s, false, 999)
	c, i = versions()
	require.Equal(t, []int{998}, c)
	require.Equal(t, []int{999}, i)

	_, err = s.w.ExecContext(ctx, `ALTER TABLE pronto_migrations DROP COLUMN older_binaries_ok`)
	require.NoError(t, err)
	c, i = versions()
	require.Empty(t, c)
	require.Equal(t, []int{998, 999}, i)
}
