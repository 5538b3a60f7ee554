package redistest

import (
	"cmp"
	"context"
	"os"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// Addr is the Redis the tests share: PRONTO_TEST_REDIS_ADDR, else the machine's Redis at
// 127.0.0.1:6379.
func Addr() string {
	return cmp.Or(os.Getenv("PRONTO_TEST_REDIS_ADDR"), "127.0.0.1:6379")
}

// KeyPrefix returns a key prefix of the test's own ("prontotest:<uuid>:") on the shared Redis, so
// that tests running at once never see each other's keys, and deletes every key under it when the
// test ends, through a connection of its own (the store's may be closed or cut by then). It fails
// the test, saying what to start, when that Redis does not answer.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: Addr(), PoolSize: 1})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("this test needs Redis at %s (start one: redis-server --daemonize yes --port 6379 --save \"\" --appendonly no): %v", Addr(), err)
	}
	prefix := "prontotest:" + uuidv7.New() + ":"
	t.Cleanup(func() {
		defer rdb.Close()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = rdb.Del(ctx, iter.Val()).Err()
		}
	})
	return prefix
}
