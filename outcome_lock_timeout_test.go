package pronto_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// The tests here hold the jobs table ACCESS EXCLUSIVE, as a long migration does, while the store's
// sessions carry lock_timeout (as a DBA's ALTER ROLE ... SET gives them): every statement of the
// client fails with 55P03 until the lock is released. Such an error says nothing about the data
// written, so nothing the client must not lose may be given up on for it.

// keptLog is a slog handler that keeps every record's message and attributes.
type keptLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *keptLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *keptLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}
func (l *keptLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *keptLog) WithGroup(string) slog.Handler      { return l }

// count returns how many records contain s.
func (l *keptLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

func (l *keptLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

type lockTimeoutArgs struct {
	N int `json:"n"`
}

func (lockTimeoutArgs) Kind() string { return "locktimeout.block" }

// sessionPool opens a small pool to the test database whose sessions carry the given settings.
func sessionPool(t *testing.T, params map[string]string) *pgxpool.Pool {
	t.Helper()
	return testdb.NewPoolWith(t, 4, params)
}

// lockTimeoutStore is a migrated PostgreSQL store in a schema of its own, on sessions with a
// lock_timeout of 200 ms.
func lockTimeoutStore(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	schema := testdb.Schema(t)
	st, err := postgres.New(sessionPool(t, map[string]string{"lock_timeout": "200ms"}), postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	t.Cleanup(func() { _ = st.Close() })
	return st, schema
}

// lockJobsTable takes the jobs table of schema ACCESS EXCLUSIVE, as a migration would; the returned
// function releases it.
func lockJobsTable(t *testing.T, schema string) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE "+schema+".jobs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Rollback(ctx)) }
}

func lockTimeoutConfig(workers *pronto.Workers, logs *keptLog) *pronto.Config {
	return &pronto.Config{
		Queues:            defaultQueue(1),
		Workers:           workers,
		LeaseDuration:     10 * time.Second,
		HeartbeatInterval: time.Second,
		RescueInterval:    100 * time.Millisecond,
		Logger:            slog.New(logs),
	}
}

// TestOutcomeSurvivesLockTimeout: the outcome of a job whose worker returns while the migration
// holds the table is kept, tried again past the tries an outcome the store refuses gets, and written
// once the lock is gone: the job completes in its first attempt, its work done once, never rescued.
func TestOutcomeSurvivesLockTimeout(t *testing.T) {
	ctx := context.Background()
	st, schema := lockTimeoutStore(t)

	var runs atomic.Int32
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[lockTimeoutArgs]) error {
		runs.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}))
	logs := &keptLog{}
	c := startClient(t, st, lockTimeoutConfig(workers, logs))
	job, err := c.Insert(ctx, lockTimeoutArgs{N: 1}, &pronto.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job never started")
	}

	unlock := lockJobsTable(t, schema)
	close(release)
	// More failed writes than the completer's three tries for an outcome the store refuses.
	require.Eventually(t, func() bool {
		return logs.count("given up") > 0 || logs.count("writing job outcomes failed") >= 4
	}, 60*time.Second, 20*time.Millisecond)
	unlock()
	require.GreaterOrEqual(t, logs.count("55P03"), 1, "the outcome's write never met the lock: %s", logs.dump())
	require.Zero(t, logs.count("given up"), "the outcome was given up: %s", logs.dump())

	got := waitState(t, c, job.ID, pronto.StateCompleted)
	require.Equal(t, 1, got.Attempt, "the job ran again; logs:\n%s", logs.dump())
	require.EqualValues(t, 1, runs.Load(), "the job's work ran %d times", runs.Load())
}

// TestCompletedInTxEventSurvivesLockTimeout: a worker completes its job in its own transaction
// (CompleteTx) and commits; as it returns, the migration holds the table, so the client's read of
// the job, to learn whether the transaction committed, fails for a while. The client reads it again
// until it answers and reports EventCompleted for the job (docs/observability.md: "Each event is
// reported once, by one process"), rather than writing the outcome Work returned, which the store
// refuses for a job no longer active, and reporting nothing.
func TestCompletedInTxEventSurvivesLockTimeout(t *testing.T) {
	ctx := context.Background()
	st, schema := lockTimeoutStore(t)
	appPool := sessionPool(t, nil)

	committed := make(chan struct{}, 4)
	release := make(chan struct{})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[lockTimeoutArgs]) error {
		tx, err := appPool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := pronto.CompleteTx(ctx, tx); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		committed <- struct{}{}
		<-release
		return nil
	}))
	logs := &keptLog{}
	c := startClient(t, st, lockTimeoutConfig(workers, logs))
	events, unsubscribe := c.Subscribe(pronto.EventCompleted)
	defer unsubscribe()
	job, err := c.Insert(ctx, lockTimeoutArgs{N: 2}, &pronto.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	select {
	case <-committed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the job's transaction never committed; logs:\n%s", logs.dump())
	}

	unlock := lockJobsTable(t, schema)
	close(release)
	// Hold the lock until the client's read of the job has failed more than once.
	require.Eventually(t, func() bool {
		return logs.count("reading a job completed in a transaction failed") >= 2
	}, 30*time.Second, 20*time.Millisecond)
	unlock()

	got := waitState(t, c, job.ID, pronto.StateCompleted)
	require.Equal(t, 1, got.Attempt)
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Job != nil && ev.Job.ID == job.ID {
				require.Zero(t, logs.count("writing the outcome Work returned"), "logs:\n%s", logs.dump())
				return
			}
		case <-timeout:
			t.Fatalf("job %s is completed but no EventCompleted was ever emitted for it; logs:\n%s", job.ID, logs.dump())
		}
	}
}
