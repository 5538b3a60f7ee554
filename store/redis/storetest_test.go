package redis

import (
	"cmp"
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// testAddr is the Redis the tests use: PRONTO_TEST_REDIS_ADDR, else the machine's default Redis
// (a private server keeps per-command statistics of a benchmark free of other clients).
var testAddr = cmp.Or(os.Getenv("PRONTO_TEST_REDIS_ADDR"), "127.0.0.1:6379")

// testClient returns a client of the test Redis, failing the test with how to start one when it
// cannot be reached.
func testClient(t testing.TB) goredis.UniversalClient {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: testAddr, PoolSize: 8})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("redis store tests need Redis at %s (%v); start one with:\n"+
			"  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no", testAddr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newTestStore returns a store on the test Redis under a key prefix of its own, whose keys are
// deleted when the test ends.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	return storeWithPrefix(t, "prontotest:"+uuidv7.New()+":")
}

func storeWithPrefix(t testing.TB, prefix string) *Store {
	t.Helper()
	rdb := testClient(t)
	s, err := New(context.Background(), rdb, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		dropPrefix(rdb, prefix)
	})
	return s
}

// dropPrefix deletes every key under prefix (tests only: SCAN is fine here).
func dropPrefix(rdb goredis.UniversalClient, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for _, k := range keys {
		rdb.Del(ctx, k)
	}
}

// TestStore runs the behaviour suite every backend passes; each test has a key prefix of its own.
// Reopen opens a second store, on a client of its own, over the same prefix, as another process
// would.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return newTestStore(t) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			rdb := testClient(t)
			s2, err := New(context.Background(), rdb, Options{Prefix: s.(*Store).Prefix()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s2.Close() })
			return s2
		},
	})
}

// BenchmarkStore measures the store's hot paths through the shared benchmarks.
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, storetest.BenchHarness{
		New: func(b *testing.B) store.Store { return newTestStore(b) },
	})
}
