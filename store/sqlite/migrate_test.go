package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestApplyAndRevertMigrationsReportTheirOwnWork: ApplyMigrations and RevertMigrations return what
// the call itself changed; RevertMigrations shows its check the migrations it then reverts, and a
// check that fails reverts nothing.
func TestApplyAndRevertMigrationsReportTheirOwnWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "pronto.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	known, err := loadMigrations()
	require.NoError(t, err)

	done, err := s.ApplyMigrations(ctx)
	require.NoError(t, err)
	require.Len(t, done, len(known))
	for i, m := range done {
		require.Equal(t, known[i].version, m.Version)
		require.True(t, m.Applied)
		require.False(t, m.AppliedAt.IsZero())
	}
	done, err = s.ApplyMigrations(ctx)
	require.NoError(t, err)
	require.Empty(t, done, "nothing was left to apply")

	refused := errors.New("refused")
	_, err = s.RevertMigrations(ctx, 2, func(context.Context, []store.Migration) error { return refused })
	require.Same(t, refused, err, "the check's error is returned as it is")
	require.NoError(t, s.CheckSchema(ctx), "a refused rollback reverts nothing")

	newest := len(known)
	var checked []store.Migration
	done, err = s.RevertMigrations(ctx, 2, func(ctx context.Context, revert []store.Migration) error {
		checked = revert
		// The check reads through the store while the rollback holds the write lock.
		_, err := s.DownDataLoss(ctx, len(revert))
		return err
	})
	require.NoError(t, err)
	require.Equal(t, checked, done)
	require.Equal(t, []int{newest, newest - 1}, []int{done[0].Version, done[1].Version}, "newest first")
	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.False(t, status[newest-1].Applied)
	require.False(t, status[newest-2].Applied)
	require.True(t, status[newest-3].Applied)

	done, err = s.RevertMigrations(ctx, newest+5, nil)
	require.NoError(t, err)
	require.Len(t, done, newest-2)
	done, err = s.RevertMigrations(ctx, 1, func(context.Context, []store.Migration) error {
		t.Error("check called with nothing to revert")
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, done)
}
