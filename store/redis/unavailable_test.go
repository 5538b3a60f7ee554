package redis

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// TestRefusedOnlyForTheRequestsData: of the errors a real Redis gives, only those the request's own
// data causes are refusals (store.IsRefused), which the completer gives up on after a few tries;
// a server that cannot write now (persistence failing, a script running, a replica, full, an ACL
// not granting a command yet) may pass when tried again, and an outcome is never given up for it.
func TestRefusedOnlyForTheRequestsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	snapshots := filepath.Join(t.TempDir(), "snapshots")
	require.NoError(t, os.Mkdir(snapshots, 0o700))
	for _, tc := range []struct {
		name    string
		args    []string // the private server's
		produce func(t *testing.T, s *Store, rdb *goredis.Client) error
		prefix  string // of the error produced
		refused bool
	}{
		{
			name: "a store function failing on its arguments", prefix: "ERR user_function:", refused: true,
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				return scriptHeartbeat.Run(ctx, rdb, s.keys("q"), "w", "an hour", "id", "").Err()
			},
		},
		{
			name: "a store function passing on a value that is no argument", prefix: "ERR Lua redis lib", refused: true,
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				return scriptPromote.Run(ctx, rdb, s.keys("q"), "all").Err()
			},
		},
		{
			name: "a value that is not a number", prefix: "ERR value is not", refused: true,
			produce: func(t *testing.T, _ *Store, rdb *goredis.Client) error {
				return rdb.Do(ctx, "ZADD", "z", "soon", "m").Err()
			},
		},
		{
			name: "an increment that overflows", prefix: "ERR increment or decrement would overflow", refused: true,
			produce: func(t *testing.T, _ *Store, rdb *goredis.Client) error {
				require.NoError(t, rdb.HSet(ctx, "h", "n", strconv.FormatInt(1<<63-1, 10)).Err())
				return rdb.HIncrBy(ctx, "h", "n", 1).Err()
			},
		},
		{
			name: "writes stopped by a failed snapshot", prefix: "MISCONF",
			args: []string{"--save", "3600 1", "--stop-writes-on-bgsave-error", "yes", "--dir", snapshots},
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				dir, err := rdb.ConfigGet(ctx, "dir").Result()
				require.NoError(t, err)
				require.NoError(t, os.RemoveAll(dir["dir"])) // the snapshot has nowhere to go
				require.Equal(t, snapshots, dir["dir"])
				require.NoError(t, rdb.BgSave(ctx).Err())
				require.Eventually(t, func() bool {
					info, _ := rdb.Info(ctx, "persistence").Result()
					return strings.Contains(info, "rdb_last_bgsave_status:err")
				}, 10*time.Second, 10*time.Millisecond)
				_, err = s.Insert(ctx, []*store.InsertParams{testJob("q")})
				return err
			},
		},
		{
			name: "a script running past busy-reply-threshold", args: []string{"--busy-reply-threshold", "50"}, prefix: "BUSY",
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
					return err != nil && strings.HasPrefix(err.Error(), "redis: insert: BUSY")
				}, 10*time.Second, 10*time.Millisecond)
				return err
			},
		},
		{
			name: "a replica", prefix: "READONLY",
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				master := redistest.StartServer(t, "--appendonly", "no")
				host, port, _ := strings.Cut(master.Addr(), ":")
				require.NoError(t, rdb.ReplicaOf(ctx, host, port).Err())
				_, err := s.Insert(ctx, []*store.InsertParams{testJob("q")})
				return err
			},
		},
		{
			name: "a full Redis", prefix: "OOM",
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				fill(t, rdb)
				_, err := s.Insert(ctx, []*store.InsertParams{testJob("q")})
				return err
			},
		},
		{
			name: "a command the ACL does not grant yet", prefix: "ERR The user executing the script can't run this command",
			produce: func(t *testing.T, s *Store, rdb *goredis.Client) error {
				require.NoError(t, rdb.Do(ctx, "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all", "-zadd").Err())
				app, err := New(ctx, goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, Username: "app",
					Password: "s3cret", MaxRetries: -1}), Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = app.Close() })
				_, err = app.Insert(ctx, []*store.InsertParams{testJob("q")})
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, rdb := privateStore(t, tc.args...)
			err := tc.produce(t, s, rdb)
			require.Error(t, err)
			var re goredis.Error
			require.ErrorAs(t, err, &re)
			require.True(t, strings.HasPrefix(re.Error(), tc.prefix), "the error produced: %v", err)
			require.Equal(t, tc.refused, store.IsRefused(s, err), "refused: %v", err)
			require.Equal(t, tc.refused, s.Refused(err))
		})
	}
}
