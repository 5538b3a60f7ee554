// Package testdb gives tests a real PostgreSQL: a shared pool to the test database and a fresh schema
// per test, dropped when the test ends. It never skips: a test that needs PostgreSQL fails with a
// message that says what to start, in CI and on a laptop alike.
package testdb

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is used when PRONTO_TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the test database URL: PRONTO_TEST_DATABASE_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("PRONTO_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
	counter  atomic.Int64
)

// SharedPoolConns is the size of the pool Pool returns. Tests keep their pools small so that the
// whole suite fits in a PostgreSQL with other clients on it (README states the budget).
const SharedPoolConns = 4

// Unreachable explains what to do when the test database cannot be reached.
func Unreachable(err error) string {
	if strings.Contains(err.Error(), "53300") || strings.Contains(err.Error(), "too many clients") {
		return fmt.Sprintf("PostgreSQL at %s has no free connection for this test: %v\n"+
			"Other programs hold most of its max_connections, and `make test` needs up to 50 at once (README). Check with\n"+
			"    SELECT current_setting('max_connections')::int - count(*) FROM pg_stat_activity WHERE backend_type = 'client backend';\n"+
			"then stop some of those programs or raise max_connections.", URL(), err)
	}
	return fmt.Sprintf("PostgreSQL is required for this test and is unreachable at %s: %v\n"+
		"Start it (for example: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start),\n"+
		"or point PRONTO_TEST_DATABASE_URL at a database the tests may create schemas in.", URL(), err)
}

// Pool returns a pool shared by every test in the package. It fails the test when PostgreSQL is down.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(URL())
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = SharedPoolConns
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pool, poolErr = pgxpool.NewWithConfig(ctx, cfg)
		if poolErr == nil {
			poolErr = pool.Ping(ctx)
		}
	})
	if poolErr != nil {
		t.Fatal(Unreachable(poolErr))
	}
	return pool
}

// NewPool returns a pool of its own for a test that needs one (for example one per simulated client),
// closed when the test ends.
func NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return NewPoolWith(t, maxConns, nil)
}

// NewPoolWith is NewPool whose sessions carry the given settings (as ALTER ROLE ... SET would give
// them: a lock_timeout, a statement_timeout, default_transaction_read_only).
func NewPoolWith(t testing.TB, maxConns int32, settings map[string]string) *pgxpool.Pool {
	t.Helper()
	return newPool(t, "", maxConns, settings)
}

// Addr is the test database's host:port, the target of a proxy in front of it.
func Addr(t testing.TB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatal(Unreachable(err))
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// NewPoolAt is NewPool connecting to addr (host:port) instead of the test database's address: a
// proxy in front of it (see Addr).
func NewPoolAt(t testing.TB, addr string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return newPool(t, addr, maxConns, nil)
}

func newPool(t testing.TB, addr string, maxConns int32, settings map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatal(Unreachable(err))
	}
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
		cfg.ConnConfig.Fallbacks = nil
	}
	cfg.MaxConns = maxConns
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(Unreachable(err))
	}
	if err := p.Ping(context.Background()); err != nil {
		p.Close()
		t.Fatal(Unreachable(err))
	}
	t.Cleanup(p.Close)
	return p
}

// Schema creates a schema no other test uses and drops it (with everything in it) when the test ends.
// Its name is returned; nothing is created in it.
func Schema(t testing.TB) string {
	t.Helper()
	p := Pool(t)
	name := fmt.Sprintf("pt_%s_%d_%d", sanitize(t.Name()), os.Getpid(), counter.Add(1))
	if len(name) > 60 {
		name = fmt.Sprintf("pt_%d_%d_%d", time.Now().UnixNano()%1e9, os.Getpid(), counter.Add(1))
	}
	ctx := context.Background()
	if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
		t.Fatalf("drop schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = p.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	})
	return name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 30 {
			break
		}
	}
	return b.String()
}

// LockTable takes table ACCESS EXCLUSIVE in a transaction of its own, as a migration would, until
// the test ends: every statement on it waits, and fails once past the session's lock_timeout or
// statement_timeout. The returned function releases it sooner.
func LockTable(t testing.TB, table string) (release func()) {
	t.Helper()
	ctx := context.Background()
	locker, err := NewPool(t, 1).Begin(ctx)
	if err != nil {
		t.Fatal(Unreachable(err))
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = locker.Rollback(ctx) }) }
	t.Cleanup(release)
	if _, err := locker.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return release
}
