package postgres

import (
	"testing"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// TestStore runs the behaviour suite every backend passes. Each test gets a schema of its own;
// Reopen opens a second store, on a pool of its own, over the same schema, as another process would.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return setup(t) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return newStore(t, testdb.NewPool(t, 4), s.(*Store).Schema())
		},
	})
}

// BenchmarkStore measures the store's hot paths through the shared benchmarks.
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, storetest.BenchHarness{
		New: func(b *testing.B) store.Store { return setup(b) },
	})
}
