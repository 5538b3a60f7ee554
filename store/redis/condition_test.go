package redis

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// TestConditionOfRedis: on real servers, a data set loading (LOADING), a script running past
// busy-reply-threshold (BUSY), a replica cut from its master that serves no stale data
// (MASTERDOWN) and a cluster not serving a key's slot (CLUSTERDOWN) are each named, not the
// generic "unavailable", and each is still IsUnavailable for the HTTP API.
func TestConditionOfRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		args    []string
		produce func(t *testing.T, s *Store, rdb *goredis.Client) error
		want    store.Condition
	}{
		{
			name: "loading", want: store.ConditionLoading,
			// Events are processed every KiB of the load, and each key takes 100 µs to load.
			args: []string{"--enable-debug-command", "yes", "--loading-process-events-interval-bytes", "1024"},
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				pipe := rdb.Pipeline()
				for i := range 20000 {
					pipe.Set(ctx, fmt.Sprint("fill:", i), strings.Repeat("x", 32), 0)
				}
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
				require.NoError(t, rdb.ConfigSet(ctx, "key-load-delay", "100").Err())
				reloader := goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, MaxRetries: -1, ReadTimeout: -1})
				t.Cleanup(func() { _ = reloader.Close() })
				reloaded := make(chan error, 1)
				go func() { reloaded <- reloader.Do(ctx, "DEBUG", "RELOAD").Err() }()
				t.Cleanup(func() { require.NoError(t, <-reloaded) })
				var err2 error
				require.Eventually(t, func() bool {
					_, err2 = s.GetJob(ctx, "01890000-0000-7000-8000-000000000000")
					return err2 != nil && strings.Contains(err2.Error(), "LOADING")
				}, 20*time.Second, 5*time.Millisecond)
				return err2
			},
		},
		{
			name: "a script running past busy-reply-threshold", args: []string{"--busy-reply-threshold", "50"},
			want: store.ConditionBusyScript,
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				spin := goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
				t.Cleanup(func() { _ = spin.Close() })
				spun := make(chan struct{})
				go func() {
					defer close(spun)
					spin.Eval(ctx, "while true do end", nil)
				}()
				t.Cleanup(func() {
					require.Eventually(t, func() bool { return rdb.ScriptKill(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond)
					<-spun
				})
				var err error
				require.Eventually(t, func() bool {
					_, err = s.Insert(ctx, []*store.InsertParams{testJob("q")})
					return err != nil && strings.Contains(err.Error(), "BUSY")
				}, 10*time.Second, 10*time.Millisecond)
				return err
			},
		},
		{
			name: "a replica without its master", args: []string{"--replica-serve-stale-data", "no"},
			want: store.ConditionMasterDown,
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				// A master that is never there: a port nothing listens on.
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
				require.NoError(t, l.Close())
				require.NoError(t, rdb.ReplicaOf(ctx, "127.0.0.1", port).Err())
				_, err = s.GetJob(ctx, "01890000-0000-7000-8000-000000000000")
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, rdb := privateStore(t, tc.args...)
			err := tc.produce(t, s, rdb)
			checkCondition(t, s, err, tc.want)
		})
	}
	t.Run("a cluster not serving the slot", func(t *testing.T) {
		t.Parallel()
		// A cluster node with no slots assigned: every key's slot is unserved.
		srv := redistest.StartServer(t, "--appendonly", "no", "--cluster-enabled", "yes")
		rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 2})
		t.Cleanup(func() { _ = rdb.Close() })
		err := rdb.Get(ctx, "k").Err()
		// The store's classifier needs no connection of its own.
		checkCondition(t, &Store{}, fmt.Errorf("redis: get job: %w", err), store.ConditionClusterDown)
	})
}

// checkCondition asserts that err is a Redis reply named want, IsUnavailable, with the backend
// reachable and a message of its own.
func checkCondition(t *testing.T, s *Store, err error, want store.Condition) {
	t.Helper()
	require.Error(t, err)
	var re goredis.Error
	require.ErrorAs(t, err, &re, "%v", err)
	require.True(t, store.IsUnavailable(s, err), "%v", err)
	c := store.ConditionOf(s, err)
	require.Equal(t, want, c, "%v", err)
	require.True(t, c.Reachable())
	require.False(t, c.PerRequest())
	require.NotEqual(t, store.ConditionUnavailable.Message(), c.Message())
}
