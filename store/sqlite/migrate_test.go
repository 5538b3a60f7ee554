package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store/storetest"
)

// TestApplyAndRevertMigrationsReportTheirOwnWork runs the shared report checks on a fresh file.
func TestApplyAndRevertMigrationsReportTheirOwnWork(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "pronto.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	storetest.RunMigrationReports(t, s)
}
