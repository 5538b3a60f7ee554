package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// VersionedStore is a store with a versioned schema whose migrations report their own work
// (PostgreSQL, SQLite): what RunMigrationReports needs.
type VersionedStore interface {
	store.Migrator
	store.ReportingMigrator
	store.SchemaChecker
	store.DownPlanner
}

// RunMigrationReports checks, on s, a store over an empty database or schema that no migration has
// touched, that ApplyMigrations and RevertMigrations return what the call itself changed, that
// RevertMigrations shows its check the migrations it then reverts, and that a check that fails
// reverts nothing. It is not part of Run, whose stores come migrated: the backends with a schema
// call it with a store of their own.
func RunMigrationReports(t *testing.T, s VersionedStore) {
	t.Helper()
	c := context.Background()

	known, err := s.MigrationStatus(c)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(known), 4, "the report checks below need a few migrations")
	for i, m := range known {
		require.Equal(t, i+1, m.Version, "migrations are numbered 1, 2, 3, ... without gaps")
		require.False(t, m.Applied, "the store must start with no migration applied")
	}

	done, err := s.ApplyMigrations(c)
	require.NoError(t, err)
	require.Len(t, done, len(known))
	for i, m := range done {
		require.Equal(t, known[i].Version, m.Version)
		require.Equal(t, known[i].Name, m.Name)
		require.True(t, m.Applied)
		require.False(t, m.AppliedAt.IsZero())
	}
	done, err = s.ApplyMigrations(c)
	require.NoError(t, err)
	require.Empty(t, done, "nothing was left to apply")

	refused := errors.New("refused")
	_, err = s.RevertMigrations(c, 2, func(context.Context, []store.Migration) error { return refused })
	require.Same(t, refused, err, "the check's error is returned as it is")
	require.NoError(t, s.CheckSchema(c), "a refused rollback reverts nothing")

	newest := len(known)
	var checked []store.Migration
	done, err = s.RevertMigrations(c, 2, func(ctx context.Context, revert []store.Migration) error {
		checked = revert
		// The check reads through the store while the rollback holds the migration lock (on
		// PostgreSQL a second connection of the pool, on SQLite a reader beside the writer).
		_, err := s.DownDataLoss(ctx, len(revert))
		return err
	})
	require.NoError(t, err)
	require.Equal(t, checked, done)
	require.Equal(t, []int{newest, newest - 1}, []int{done[0].Version, done[1].Version}, "newest first")
	status, err := s.MigrationStatus(c)
	require.NoError(t, err)
	require.False(t, status[newest-1].Applied)
	require.False(t, status[newest-2].Applied)
	require.True(t, status[newest-3].Applied)

	done, err = s.RevertMigrations(c, newest+5, nil)
	require.NoError(t, err)
	require.Len(t, done, newest-2)
	done, err = s.RevertMigrations(c, 1, func(context.Context, []store.Migration) error {
		t.Error("check called with nothing to revert")
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, done)
}

// MarkingStore is a versioned store that reads the marks newer pronto versions record with their
// migrations (whether binaries that do not know a migration may run on its schema).
type MarkingStore interface {
	VersionedStore
	// NewerMigrations lists the applied migrations this binary does not know, by their mark.
	NewerMigrations(ctx context.Context) (compatible, incompatible []store.Migration, err error)
}

// RunNewerMigrationMarks checks, on s, a migrated store, that this binary runs on a schema that a
// newer pronto migrated further with migrations marked compatible with older binaries, and refuses
// one that also has a migration marked incompatible, naming it and every newer migration to
// revert. record records a migration as the newer pronto applies it, with its mark.
func RunNewerMigrationMarks(t *testing.T, s MarkingStore, record func(version int, name string, olderOK bool)) {
	t.Helper()
	c := context.Background()
	status, err := s.MigrationStatus(c)
	require.NoError(t, err)
	last := status[len(status)-1].Version

	record(last+1, "future_a", true)
	record(last+2, "future_b", true)
	require.NoError(t, s.CheckSchema(c), "newer migrations marked compatible let this binary run")
	compatible, incompatible, err := s.NewerMigrations(c)
	require.NoError(t, err)
	require.Empty(t, incompatible)
	require.Len(t, compatible, 2)
	require.Equal(t, last+1, compatible[0].Version)
	require.Equal(t, "future_b", compatible[1].Name)
	// Still, this binary reverts nothing under them: they may depend on what it would revert.
	require.ErrorIs(t, s.MigrateDown(c, 1), store.ErrSchemaTooNew)

	record(last+3, "future_c", false)
	err = s.CheckSchema(c)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	var se *store.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, []int{last + 1, last + 2, last + 3}, se.Unknown, "all three must be reverted to run this binary")
	require.ErrorContains(t, err, fmt.Sprintf("not marked compatible with older binaries: %03d_future_c; this binary knows migrations up to %03d",
		last+3, last))
	_, incompatible, err = s.NewerMigrations(c)
	require.NoError(t, err)
	require.Len(t, incompatible, 1)
}
