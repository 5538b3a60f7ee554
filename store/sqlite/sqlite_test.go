package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// openTest opens a migrated store on a file in a fresh temporary directory, closed at cleanup.
func openTest(t testing.TB, opts ...Option) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "pronto.db"), opts...)
}

// openAt opens a migrated store on path, closed at cleanup.
func openAt(t testing.TB, path string, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(ctx))
	return s
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return openTest(t) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return openAt(t, s.(*Store).Path())
		},
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, storetest.BenchHarness{
		New: func(b *testing.B) store.Store { return openTest(b) },
	})
}
