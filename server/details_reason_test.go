package server

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestDetailsReasonOfRedisReplica: a Redis that became a replica (as a failed-over primary does)
// refuses writes with READONLY, and one cut from its master that serves no stale data refuses reads
// with MASTERDOWN: each is a 503 naming the condition in details.reason by store.ConditionOf's
// name, as health and the dashboard do, not the generic "unavailable".
func TestDetailsReasonOfRedisReplica(t *testing.T) {
	for _, c := range []struct {
		name, stale, method, path, body, reason string
	}{
		{"read-only replica", "yes", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, string(store.ConditionReadOnly)},
		{"replica without its master", "no", "GET", "/ojs/v1/jobs/01890000-0000-7000-8000-000000000000", "", string(store.ConditionMasterDown)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.StartServer(t, "--appendonly", "no", "--replica-serve-stale-data", c.stale)
			rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 4})
			t.Cleanup(func() { _ = rdb.Close() })
			st, err := redis.New(ctx, rdb, redis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			s := serverOnStore(t, st)

			// A master that is never there: a port nothing listens on.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ReplicaOf(ctx, "127.0.0.1", port).Err(); err != nil {
				t.Fatal(err)
			}
			var body any
			if c.body != "" {
				body = c.body
			}
			r := call(t, s, c.method, c.path, body)
			checkUnavailable(t, r.status, r.header, r.raw, c.reason)
		})
	}
}

// TestDetailsReasonOfSQLiteBusy: a write meeting another process's write transaction past the busy
// timeout is a 503 whose details.reason is "busy", the name health and the dashboard give it.
func TestDetailsReasonOfSQLiteBusy(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	st, err := sqlite.Open(ctx, path, sqlite.WithBusyTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := serverOnStore(t, st)

	// Another process's connection, as far as the store can tell, holding the write lock.
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`)
	checkUnavailable(t, r.status, r.header, r.raw, string(store.ConditionBusy))

	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`); r.status != 201 {
		t.Fatalf("once the lock is released: %d %s", r.status, r.raw)
	}
}

// serverOnStore is a Server over st with an insert-only client.
func serverOnStore(t *testing.T, st store.Store) *Server {
	t.Helper()
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: c})
	return s
}
