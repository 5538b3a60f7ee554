package cli

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// migrationGate holds a database's migration lock, so that several runs of the CLI started at once
// all reach it, each having read the schema's state, before any goes on.
type migrationGate struct {
	// waiting counts the runs waiting for the lock.
	waiting func() int64
	release func()
}

// gatedBackend is a database the concurrent migrate commands are tested on.
type gatedBackend struct {
	name string
	// setup returns the flags of a fresh database without a schema, and a function that holds its
	// migration lock.
	setup func(t *testing.T) (db []string, hold func(t *testing.T) migrationGate)
	// hasTable reports whether the database has pronto's table of that name (unprefixed).
	hasTable func(t *testing.T, db []string, table string) bool
}

var gatedBackends = []gatedBackend{
	{
		name: "sqlite",
		setup: func(t *testing.T) ([]string, func(t *testing.T) migrationGate) {
			path := filepath.Join(t.TempDir(), "pronto.db")
			return []string{"--database-url", "sqlite:" + path}, func(t *testing.T) migrationGate {
				return holdSQLiteWriter(t, path)
			}
		},
		hasTable: func(t *testing.T, db []string, table string) bool {
			s, err := sqlite.Open(context.Background(), strings.TrimPrefix(db[1], "sqlite:"))
			require.NoError(t, err)
			defer s.Close()
			var n int
			require.NoError(t, s.DB().QueryRow(
				`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, "pronto_"+table).Scan(&n))
			return n > 0
		},
	},
	{
		name: "postgres",
		setup: func(t *testing.T) ([]string, func(t *testing.T) migrationGate) {
			schema := testdb.Schema(t)
			return []string{"--database-url", testdb.URL(), "--schema", schema}, func(t *testing.T) migrationGate {
				return holdPostgresMigrationLock(t, schema)
			}
		},
		hasTable: func(t *testing.T, db []string, table string) bool {
			var ok bool
			require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
				`SELECT to_regclass($1) IS NOT NULL`, db[3]+"."+table).Scan(&ok))
			return ok
		},
	},
}

// holdSQLiteWriter holds the writer connection of the SQLite store at path in a write transaction.
// Every CLI run in this process opens the same store for the file, so their migrations and
// rollbacks wait for that connection.
func holdSQLiteWriter(t *testing.T, path string) migrationGate {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	tx, err := s.DB().BeginTx(context.Background(), nil)
	require.NoError(t, err)
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	base := s.DB().Stats().WaitCount
	return migrationGate{waiting: func() int64 { return s.DB().Stats().WaitCount - base }, release: release}
}

// holdPostgresMigrationLock takes the advisory lock every migration and rollback of schema takes
// (the key is the store's: a hash of "pronto-migrate:" and the schema).
func holdPostgresMigrationLock(t *testing.T, schema string) migrationGate {
	t.Helper()
	ctx := context.Background()
	h := fnv.New64a()
	h.Write([]byte("pronto-migrate:" + schema))
	key := int64(h.Sum64())
	pool := testdb.NewPool(t, 2)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key)
	require.NoError(t, err)
	waiting := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, key).Scan(&n); err != nil {
			t.Errorf("counting the runs waiting for the migration lock: %v", err) // called off the test's goroutine
		}
		return n
	}
	return migrationGate{waiting: waiting, release: release}
}

// runTogether runs the CLI with each of args at once, letting them on only when every one waits
// for the migration lock gate holds.
func runTogether(t *testing.T, gate migrationGate, args ...[]string) []result {
	t.Helper()
	out := make([]result, len(args))
	var wg sync.WaitGroup
	for i, a := range args {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = run(t, a...)
		}()
	}
	require.Eventually(t, func() bool { return gate.waiting() >= int64(len(args)) }, time.Minute, 10*time.Millisecond,
		"every run reaches the migration lock")
	gate.release()
	wg.Wait()
	return out
}

// migrationCount returns how many migrations the database's pronto knows, and the version of the
// one named name, from pronto migrate status.
func migrationCount(t *testing.T, db []string, name string) (total, version int) {
	t.Helper()
	out := run(t, with(db, "migrate", "status")...).ok(t).stdout
	m := regexp.MustCompile(`(?m)^(\d+)\s+(?:` + name + `)\s`).FindStringSubmatch(out)
	require.NotNil(t, m, "migration %s in:\n%s", name, out)
	version, _ = strconv.Atoi(m[1])
	m = regexp.MustCompile(`of (\d+) migrations applied`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	total, _ = strconv.Atoi(m[1])
	return total, version
}

// reported returns the migrations a run says it applied or rolled back (verb), in its order.
func reported(r result, verb string) []string {
	var out []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if name, ok := strings.CutPrefix(line, verb+" "); ok {
			out = append(out, name)
		}
	}
	return out
}

// TestConcurrentMigrateUpReportsOnlyItsOwnWork: runs of pronto migrate up at once (every replica of
// a deploy) all succeed, and each migration is reported applied by exactly one of them.
func TestConcurrentMigrateUpReportsOnlyItsOwnWork(t *testing.T) {
	for _, b := range gatedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, hold := b.setup(t)
			res := runTogether(t, hold(t), with(db, "migrate", "up"), with(db, "migrate", "up"), with(db, "migrate", "up"))
			seen := map[string]int{}
			for _, r := range res {
				r.ok(t)
				require.Contains(t, r.stdout, "is up to date", r)
				for _, name := range reported(r, "applied") {
					seen[name]++
				}
			}
			total, _ := migrationCount(t, db, "init|create_jobs")
			require.Len(t, seen, total, "every migration is reported applied")
			for name, n := range seen {
				require.Equal(t, 1, n, "migration %s is reported applied by %d runs", name, n)
			}
		})
	}
}

// TestConcurrentMigrateDownChecksWhatItReverts: pronto migrate down refuses a rollback that would
// delete data even when another rollback runs at once. Each of two rollbacks of k migrations would,
// checked alone on the schema as it was, delete nothing; run together, the second reverts the k
// before them, which hold a tenant's row, and is refused, leaving them applied.
func TestConcurrentMigrateDownChecksWhatItReverts(t *testing.T) {
	for _, b := range gatedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, hold := b.setup(t)
			run(t, with(db, "migrate", "up")...).ok(t)
			run(t, with(db, "tenants", "set", "acme", "--weight", "3")...).ok(t)
			total, tenants := migrationCount(t, db, "tenants")
			k := total - tenants // the most that leaves the tenants migration applied
			require.Positive(t, k)
			steps := strconv.Itoa(k)
			run(t, with(db, "migrate", "down", "--steps", strconv.Itoa(2*k))...).fails(t, ExitError, "refusing to roll back")

			res := runTogether(t, hold(t), with(db, "migrate", "down", "--steps", steps), with(db, "migrate", "down", "--steps", steps))
			if res[0].code != ExitOK {
				res[0], res[1] = res[1], res[0]
			}
			require.Len(t, reported(res[0].ok(t), "rolled back"), k, res[0])
			res[1].fails(t, ExitError, "refusing to roll back")
			require.Regexp(t, `1 row of table (pronto_)?tenants \(0*`+strconv.Itoa(tenants)+`_tenants\)`, res[1].stderr)
			require.True(t, b.hasTable(t, db, "tenants"), "the refused rollback dropped nothing")
			require.Contains(t, run(t, with(db, "migrate", "status")...).ok(t).stdout,
				fmt.Sprintf("%d of %d migrations pending", k, total))
		})
	}
}

// TestConcurrentMigrateDownReportsOnlyItsOwnWork: two rollbacks at once each revert their own
// migrations, the newest first, and report those alone.
func TestConcurrentMigrateDownReportsOnlyItsOwnWork(t *testing.T) {
	for _, b := range gatedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, hold := b.setup(t)
			run(t, with(db, "migrate", "up")...).ok(t)
			total, _ := migrationCount(t, db, "init|create_jobs")
			res := runTogether(t, hold(t), with(db, "migrate", "down", "--steps", "2"), with(db, "migrate", "down", "--steps", "2"))
			seen := map[string]bool{}
			for _, r := range res {
				names := reported(r.ok(t), "rolled back")
				require.Len(t, names, 2, r)
				require.Greater(t, names[0], names[1], "newest first: %s", r)
				for _, name := range names {
					require.False(t, seen[name], "migration %s is reported rolled back twice", name)
					seen[name] = true
				}
			}
			require.Contains(t, run(t, with(db, "migrate", "status")...).ok(t).stdout,
				fmt.Sprintf("%d of %d migrations pending", 4, total))
		})
	}
}
