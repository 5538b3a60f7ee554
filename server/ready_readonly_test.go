package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/pgcluster"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testfs"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

const readOnlyTestKey = "k-readonly-0123456789abcdef"

// readOnlyServer is a server with an API key on st and a started insert-only client.
func readOnlyServer(t *testing.T, st store.Store) *Server {
	t.Helper()
	c, err := pronto.NewClient(st, &pronto.Config{})
	require.NoError(t, err)
	s, _ := newTestServer(t, Config{Client: c, APIKey: readOnlyTestKey})
	return s
}

// waitReady calls GET /ojs/v1/ready until it answers want (a reload of the server's settings or a
// promotion takes effect a moment later), and returns the last answer.
func waitReady(t *testing.T, s *Server, want int) *response {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := call(t, s, "GET", "/ojs/v1/ready", nil)
		if r.status == want || time.Now().After(deadline) {
			require.Equal(t, want, r.status, "%s", r.raw)
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkReadOnlyProbes: ready and health answer 503 with Retry-After naming the backend read-only;
// without the key no more than the condition, with it the backend's words (detail).
func checkReadOnlyProbes(t *testing.T, s *Server, detail string, secrets ...string) {
	t.Helper()
	rd := waitReady(t, s, 503)
	require.NotEmpty(t, rd.header.Get("Retry-After"))
	require.Contains(t, rd.body["reasons"], "backend read_only", "%s", rd.raw)
	h := call(t, s, "GET", "/ojs/v1/health", nil)
	require.Equal(t, 503, h.status, "%s", h.raw)
	require.NotEmpty(t, h.header.Get("Retry-After"))
	require.Equal(t, "degraded", h.body["status"])
	backend := h.body["backend"].(map[string]any)
	require.Equal(t, "read_only", backend["status"], "%s", h.raw)
	require.Equal(t, "read_only", backend["error"], "%s", h.raw)
	require.NotContains(t, backend, "error_detail")
	for _, r := range []*response{rd, h} {
		for _, secret := range secrets {
			require.NotContains(t, string(r.raw), secret)
		}
	}

	auth := []string{"Authorization", "Bearer " + readOnlyTestKey}
	rd = call(t, s, "GET", "/ojs/v1/ready", nil, auth...)
	require.Equal(t, 503, rd.status, "%s", rd.raw)
	require.Contains(t, fmt.Sprint(rd.body["reasons"]), "backend read_only: ")
	require.Contains(t, fmt.Sprint(rd.body["reasons"]), detail)
	h = call(t, s, "GET", "/ojs/v1/health", nil, auth...)
	require.Contains(t, h.body["backend"].(map[string]any)["error_detail"], detail)
}

// checkWritableProbes: ready and health answer 200, backend connected.
func checkWritableProbes(t *testing.T, s *Server) {
	t.Helper()
	waitReady(t, s, 200)
	h := call(t, s, "GET", "/ojs/v1/health", nil)
	require.Equal(t, 200, h.status, "%s", h.raw)
	require.Equal(t, "connected", h.body["backend"].(map[string]any)["status"], "%s", h.raw)
}

// TestReadyFencedPostgres: a primary fenced as failover tools fence one (ALTER SYSTEM SET
// default_transaction_read_only = on and a reload) answers reads and fails every insert with 25006:
// ready and health say it is read-only, 503 with Retry-After, naming neither host nor port; once the
// fence is lifted they answer 200 again, without a restart of pronto.
func TestReadyFencedPostgres(t *testing.T) {
	ctx := context.Background()
	c := pgcluster.Start(t)
	cfg, err := pgxpool.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, postgres.Config{Schema: "ready_fenced"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	s := readOnlyServer(t, st)
	checkWritableProbes(t, s)

	admin, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	fence := func(sql string) {
		t.Helper()
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err)
		_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
	}
	fence("ALTER SYSTEM SET default_transaction_read_only = on")
	checkReadOnlyProbes(t, s, "default_transaction_read_only", fmt.Sprint(c.Port()))
	key := []string{"Authorization", "Bearer " + readOnlyTestKey}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, key...)
	require.Equal(t, 503, r.status, "an insert fails as ready said: %s", r.raw)

	fence("ALTER SYSTEM RESET default_transaction_read_only")
	checkWritableProbes(t, s)
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, key...)
}

// TestReadyRedisReplica: a Redis made a replica (as a failed-over primary is) serves reads and fails
// writes READONLY: ready and health say it is read-only; promoted again (REPLICAOF NO ONE), it is
// ready.
func TestReadyRedisReplica(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no", "--replica-serve-stale-data", "yes")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := redis.New(ctx, rdb, redis.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	s := readOnlyServer(t, st)
	checkWritableProbes(t, s)

	// A master that is never there: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	require.NoError(t, rdb.ReplicaOf(ctx, "127.0.0.1", port).Err())
	checkReadOnlyProbes(t, s, "replica", port)

	require.NoError(t, rdb.ReplicaOf(ctx, "NO", "ONE").Err())
	checkWritableProbes(t, s)
}

// TestReadySQLiteReadOnlyDirectory: a SQLite database whose directory became read-only (a
// read-only mount as root, who ignores modes; the modes otherwise) is not ready; writable again,
// it is.
func TestReadySQLiteReadOnlyDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs.db")
	st, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))
	s := readOnlyServer(t, st)
	checkWritableProbes(t, s)

	undo := testfs.MakeReadOnly(t, dir, "jobs.db")
	checkReadOnlyProbes(t, s, strings.TrimSuffix(filepath.Base(path), ".db"), dir)
	undo()
	checkWritableProbes(t, s)
}
