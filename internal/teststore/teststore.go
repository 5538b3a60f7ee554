// Package teststore opens fresh, migrated stores of every kind for the tests of the packages above
// the store contract (the server, the exporters), so that each runs its store-by-store tests on the
// same four stores set up the same way.
package teststore

import (
	"context"
	"path/filepath"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// Kinds are the names Open takes: every store pronto has.
var Kinds = []string{"memory", "sqlite", "postgres", "redis"}

// Open opens a fresh, migrated store of the given kind, closed when the test ends: memory; SQLite
// in a file of the test's temporary folder; PostgreSQL in a schema of its own over a pool of four
// (testdb); Redis on the machine's Redis (redistest.Addr) under a key prefix of its own whose keys
// are deleted at the end. A store that cannot be reached fails the test, saying what to start.
func Open(t testing.TB, kind string) store.Store {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	switch kind {
	case "memory":
		st = memory.New()
	case "sqlite":
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
		if err != nil {
			t.Fatal(err)
		}
		st = s
	case "postgres":
		s, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: testdb.Schema(t)})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	case "redis":
		return OpenRedis(t, redistest.Addr())
	default:
		t.Fatalf("unknown store %q (one of %v)", kind, Kinds)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// OpenRedis opens a fresh, migrated Redis store on the Redis at addr (a proxy in front of the
// shared one, say), under a key prefix of its own whose keys are deleted when the test ends.
func OpenRedis(t testing.TB, addr string) store.Store {
	t.Helper()
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 4, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := redis.New(ctx, rdb, redis.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
