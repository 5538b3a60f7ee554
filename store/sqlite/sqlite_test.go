package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// openTest opens a migrated store on a file in a fresh temporary directory, closed at cleanup.
func openTest(t testing.TB, opts ...Option) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "pronto.db"), opts...)
}

// openAt opens a migrated store on path, closed at cleanup.
func openAt(t testing.TB, path string, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(ctx))
	return s
}

func TestStoreSuite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return openTest(t) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return openAt(t, s.(*Store).Path())
		},
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, storetest.BenchHarness{
		New: func(b *testing.B) store.Store { return openTest(b) },
	})
}

// params returns n insert params for queue q.
func params(q string, n int) []*store.InsertParams {
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: q, Args: json.RawMessage(`[{"x":1}]`),
			MaxAttempts: 3, State: store.StateAvailable}
	}
	return ps
}

// recorder collects notifications.
type recorder struct {
	mu sync.Mutex
	ns []store.Notification
}

func record(t *testing.T, n store.Notifier) *recorder {
	r := &recorder{}
	unsub := n.Subscribe(func(x store.Notification) {
		r.mu.Lock()
		r.ns = append(r.ns, x)
		r.mu.Unlock()
	})
	t.Cleanup(unsub)
	return r
}

func (r *recorder) inserts(queue string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.ns {
		if x.Kind == store.NotifyInsert && x.Queue == queue {
			n++
		}
	}
	return n
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m.db"))
	require.NoError(t, err)
	defer s.Close()

	known, err := loadMigrations()
	require.NoError(t, err)
	require.NotEmpty(t, known)

	st, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Len(t, st, len(known))
	for _, m := range st {
		require.False(t, m.Applied, "fresh file: migration %d not applied", m.Version)
	}
	_, err = s.GetJob(ctx, "x")
	require.ErrorContains(t, err, "run Migrate")

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "Migrate is idempotent")
	st, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	for i, m := range st {
		require.True(t, m.Applied)
		require.Equal(t, known[i].version, m.Version)
		require.NotEmpty(t, m.Name)
		require.WithinDuration(t, time.Now(), m.AppliedAt, time.Minute)
	}
	_, err = s.Insert(ctx, params("q", 3))
	require.NoError(t, err)
	// The newest migration's columns and tables hold data too when it is reverted.
	unique := params("q", 1)[0]
	unique.UniqueKey, unique.UniqueUntil, unique.RateKey = "k", time.Now().Add(time.Hour), "r"
	unique.RateLimit = &store.RateLimit{MaxActive: 1}
	_, err = s.Insert(ctx, []*store.InsertParams{unique})
	require.NoError(t, err)
	wf := uuidv7.New()
	root := params("q", 1)[0]
	root.WorkflowID = wf
	child := params("q", 1)[0]
	child.WorkflowID, child.ParentIDs, child.State, child.RunOn = wf, []string{root.ID}, store.StatePending, store.RunOnComplete
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{root, child}})
	require.NoError(t, err)

	// Down to before the features migration (003): only it and the newer ones are reverted.
	require.NoError(t, s.MigrateDown(ctx, len(known)-2))
	st, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range st {
		require.Equal(t, m.Version < 3, m.Applied, "migration %d", m.Version)
	}
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs`).Scan(&n))
	require.Equal(t, 6, n, "reverting the newest migration keeps the jobs")
	// And up again: the jobs are there, and the new columns work.
	require.NoError(t, s.Migrate(ctx))
	j, err := s.GetJob(ctx, unique.ID)
	require.NoError(t, err)
	require.Empty(t, j.UniqueStates, "the reverted columns come back empty")
	_, err = s.Insert(ctx, []*store.InsertParams{unique2(unique)})
	require.NoError(t, err, "a job whose unique states were reverted holds its key no more")
	require.NoError(t, s.MigrateDown(ctx, 1))

	// Down past the first drops everything; more steps than applied is not an error.
	require.NoError(t, s.MigrateDown(ctx, len(known)+5))
	st, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range st {
		require.False(t, m.Applied)
	}
	var tables int
	require.NoError(t, s.DB().QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name LIKE 'pronto_%' AND name <> 'pronto_migrations'`).Scan(&tables))
	require.Zero(t, tables)

	// And up again, to an empty, working schema.
	require.NoError(t, s.Migrate(ctx))
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Empty(t, qs)
	_, err = s.Insert(ctx, params("q", 2))
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
}

// unique2 returns params of a new job with p's unique key.
func unique2(p *store.InsertParams) *store.InsertParams {
	q := params(p.Queue, 1)[0]
	q.UniqueKey = p.UniqueKey
	return q
}

func TestStoresOnOneFileShareNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	a := openAt(t, filepath.Join(dir, "shared.db"))
	// The same file through another spelling of its path.
	b := openAt(t, filepath.Join(dir, ".", "sub", "..", "shared.db"))
	other := openTest(t)
	require.Same(t, a.DB(), b.DB(), "stores on one file share the writer")

	ra, rb, ro := record(t, a.Notifier()), record(t, b.Notifier()), record(t, other.Notifier())
	_, err := a.Insert(ctx, params("q", 2))
	require.NoError(t, err)
	require.Equal(t, 1, rb.inserts("q"), "the other store on the file is woken, once per insert")
	require.Equal(t, 1, ra.inserts("q"))
	require.Zero(t, ro.inserts("q"), "a store on another file hears nothing")

	require.NoError(t, b.PauseQueue(ctx, "q"))
	ra.mu.Lock()
	last := ra.ns[len(ra.ns)-1]
	ra.mu.Unlock()
	require.Equal(t, store.NotifyPause, last.Kind)

	// Closing one store leaves the other working; the last close releases the file.
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	_, err = b.Insert(ctx, params("q", 1))
	require.NoError(t, err)
	require.Equal(t, 2, rb.inserts("q"))
	require.NoError(t, b.Close())
	filesMu.Lock()
	_, open := files[a.Path()]
	filesMu.Unlock()
	require.False(t, open)
}

func TestInsertSQLTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitWakesAtCommit", func(t *testing.T) {
		t.Parallel()
		s := openTest(t)
		r := record(t, s.Notifier())
		_, err := s.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)`)
		require.NoError(t, err)

		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, `INSERT INTO orders (total) VALUES (42)`)
		require.NoError(t, err)
		ps := params("tx", 3)
		jobs, err := s.InsertSQLTx(ctx, tx, ps)
		require.NoError(t, err)
		require.Len(t, jobs, 3)
		require.Zero(t, r.inserts("tx"), "no wake-up before commit")
		_, err = s.GetJob(ctx, ps[0].ID)
		require.ErrorIs(t, err, store.ErrNotFound, "invisible before commit")

		require.NoError(t, tx.Commit())
		require.Equal(t, 1, r.inserts("tx"), "woken by the commit, once per queue")
		for _, p := range ps {
			j, err := s.GetJob(ctx, p.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateAvailable, j.State)
		}
		claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "tx", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 3)
	})

	t.Run("RollbackNeitherStoresNorWakes", func(t *testing.T) {
		t.Parallel()
		s := openTest(t)
		r := record(t, s.Notifier())
		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		ps := params("tx", 2)
		_, err = s.InsertSQLTx(ctx, tx, ps)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		require.Zero(t, r.inserts("tx"))
		_, err = s.GetJob(ctx, ps[0].ID)
		require.ErrorIs(t, err, store.ErrNotFound)

		// The next transaction on the connection does not inherit the dropped wake-up.
		tx, err = s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, `CREATE TABLE t (x)`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.Zero(t, r.inserts("tx"))
	})

	t.Run("DuplicateKeepsTheTransaction", func(t *testing.T) {
		t.Parallel()
		s := openTest(t)
		r := record(t, s.Notifier())
		existing := params("tx", 1)
		_, err := s.Insert(ctx, existing)
		require.NoError(t, err)
		before := r.inserts("tx")

		tx, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		good := params("tx", 1)
		_, err = s.InsertSQLTx(ctx, tx, good)
		require.NoError(t, err)
		bad := append(params("tx", 70), existing[0]) // the duplicate comes in a later statement
		_, err = s.InsertSQLTx(ctx, tx, bad)
		require.ErrorIs(t, err, store.ErrDuplicate)
		require.NoError(t, tx.Commit())

		_, err = s.GetJob(ctx, good[0].ID)
		require.NoError(t, err, "the first insert in the transaction survives")
		_, err = s.GetJob(ctx, bad[0].ID)
		require.ErrorIs(t, err, store.ErrNotFound, "the failed batch left nothing")
		require.Equal(t, before+1, r.inserts("tx"), "only the successful batch wakes")
	})

	t.Run("ForeignConnectionWakesAtOnce", func(t *testing.T) {
		t.Parallel()
		s := openTest(t)
		r := record(t, s.Notifier())
		own, err := sql.Open("sqlite", s.Path()+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		defer own.Close()
		tx, err := own.BeginTx(ctx, nil)
		require.NoError(t, err)
		ps := params("tx", 2)
		_, err = s.InsertSQLTx(ctx, tx, ps)
		require.NoError(t, err)
		require.Equal(t, 1, r.inserts("tx"), "no hook on a foreign connection: woken at once")

		// A claim started now waits for the transaction's write lock, then sees what it committed.
		done := make(chan []*store.Job, 1)
		go func() {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "tx", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
			assert.NoError(t, err)
			done <- jobs
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, tx.Commit())
		select {
		case jobs := <-done:
			require.Len(t, jobs, 2)
		case <-time.After(10 * time.Second):
			t.Fatal("claim did not finish")
		}
	})
}

func TestOpenBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()

	notDB := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notDB, []byte(strings.Repeat("this is not a database\n", 100)), 0o600))
	_, err := Open(ctx, notDB)
	require.Error(t, err)
	require.ErrorContains(t, err, notDB)
	require.ErrorContains(t, err, "not a database")
	b, err := os.ReadFile(notDB)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "this is not a database"), "the file is left alone")

	missing := filepath.Join(dir, "no", "such", "dir", "p.db")
	_, err = Open(ctx, missing)
	require.ErrorContains(t, err, missing)
	require.ErrorContains(t, err, "does not exist")

	_, err = Open(ctx, dir)
	require.ErrorContains(t, err, "is a directory")

	_, err = Open(ctx, "")
	require.ErrorContains(t, err, "empty database path")

	_, err = Open(ctx, ":memory:")
	require.ErrorContains(t, err, "store/memory")

	// A failed open leaves no shared state behind: the path opens fine once it is valid.
	require.NoError(t, os.Remove(notDB))
	s := openAt(t, notDB)
	_, err = s.Insert(ctx, params("q", 1))
	require.NoError(t, err)
}

func TestInsertRejectsBadParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	p := params("q", 1)[0]
	p.State = store.StateActive
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.ErrorContains(t, err, p.ID)
	require.ErrorContains(t, err, "available, scheduled or pending")

	p = params("q", 1)[0]
	p.Queue = ""
	_, err = s.Insert(ctx, []*store.InsertParams{p})
	require.ErrorContains(t, err, "empty queue")
}

// TestCheckSchema: missing migrations are named, unknown applied ones say the schema is newer.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	require.NoError(t, err)
	defer s.Close()

	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaNotMigrated)
	require.ErrorContains(t, err, "schema not migrated: run pronto migrate up (SQLite database ")

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.CheckSchema(ctx))

	require.NoError(t, s.MigrateDown(ctx, 1))
	var se *store.SchemaError
	require.ErrorAs(t, s.CheckSchema(ctx), &se)
	require.Len(t, se.Missing, 1)
	known, err := loadMigrations()
	require.NoError(t, err)
	last := known[len(known)-1]
	require.ErrorContains(t, se, fmt.Sprintf("lacks 1 of %d migrations: %03d_%s", len(known), last.version, last.name))

	require.NoError(t, s.Migrate(ctx))
	_, err = s.w.ExecContext(ctx, `INSERT INTO pronto_migrations (version, name, applied_at) VALUES (999, 'future', 0)`)
	require.NoError(t, err)
	require.ErrorIs(t, s.CheckSchema(ctx), store.ErrSchemaTooNew)
}
