package redis

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// TestLibraryLoadOnFullRedisIsUnavailable: a full Redis without this version's function library
// (a new pronto version deployed, or FUNCTION FLUSH) refuses its load; the call fails with that
// OOM, the documented error of a full Redis, which reads as unavailable (503 over HTTP), not with
// the missing function.
func TestLibraryLoadOnFullRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("q")})
	require.NoError(t, err)
	require.NoError(t, rdb.FunctionFlush(ctx).Err())
	fill(t, rdb)
	_, err = s.Insert(ctx, []*store.InsertParams{testJob("q")})
	require.ErrorContains(t, err, "load the store's function library")
	require.ErrorContains(t, err, "OOM")
	require.True(t, s.Unavailable(err), "a full Redis is unavailable for now: %v", err)
}

// TestLibraryLoadRefusedByACL: an ACL user without FUNCTION LOAD on a server lacking the library
// sees the NOPERM refusal of the load, which names what to grant (docs/redis.md).
func TestLibraryLoadRefusedByACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no")
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = admin.Close() })
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all", "-function|load").Err())
	s, err := Open(ctx, "redis://app:s3cret@"+srv.Addr()+"/0", Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Insert(ctx, []*store.InsertParams{testJob("q")})
	require.ErrorContains(t, err, "NOPERM")
	require.NotContains(t, err.Error(), "s3cret")
	require.False(t, s.Unavailable(err), "a refusal lasts until the user is granted FUNCTION LOAD")
}
