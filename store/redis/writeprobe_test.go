package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// TestProbeWritableReplica: a store whose URL points at a replica answers reads, and every write
// fails READONLY; ProbeWritable says it is read-only (ErrReadOnly, condition read_only), and says
// nothing once the replica is promoted (REPLICAOF NO ONE), without a new store.
func TestProbeWritableReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := redistest.StartServer(t)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	replica := redistest.StartServer(t, "--replicaof", host, port)
	prefix := "prontotest:" + uuidv7.New() + ":"

	open := func(addr string) (*Store, *goredis.Client) {
		rdb := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 2})
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := New(ctx, rdb, Options{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s, rdb
	}
	ps, _ := open(primary.Addr())
	require.NoError(t, ps.Migrate(ctx))
	require.NoError(t, store.ProbeWritable(ctx, ps))

	rs, rrdb := open(replica.Addr())
	_, err := rs.GetJob(ctx, uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound, "a read passes on the replica")
	_, err = rs.Insert(ctx, []*store.InsertParams{testJob("q")})
	require.Error(t, err, "a write fails on the replica")
	require.Equal(t, store.ConditionReadOnly, store.ConditionOf(rs, err), "%v", err)

	err = store.ProbeWritable(ctx, rs) // as the server asks it
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.Equal(t, store.ConditionReadOnly, store.ConditionOf(rs, err))
	require.True(t, store.IsUnavailable(rs, err))
	require.NotContains(t, err.Error(), port, "the master's address is not told")

	require.NoError(t, rrdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	deadline := time.Now().Add(10 * time.Second)
	for err = store.ProbeWritable(ctx, rs); err != nil && time.Now().Before(deadline); err = store.ProbeWritable(ctx, rs) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "promoted")
}
