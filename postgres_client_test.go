package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// startReportingClient starts a client with two workers on a fresh PostgreSQL schema, polling every
// poll. Its echo worker sends report(job) to the returned channel for every job it runs.
func startReportingClient(t *testing.T, poll time.Duration, report func(*pronto.Job[echoArgs]) string) (*testStore, *pronto.Client, <-chan string) {
	t.Helper()
	ts := newTestStore(t, kindPostgres)
	ran := make(chan string, 4)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
		ran <- report(j)
		return nil
	}))
	cfg := fastConfig(workers, defaultQueue(2))
	cfg.PollInterval = poll
	return ts, startClient(t, ts.Store, cfg), ran
}

func TestInsertTxCommitAndRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Only a notification can wake the client.
	ts, c, ran := startReportingClient(t, time.Hour, func(j *pronto.Job[echoArgs]) string { return j.Args.Message })
	pool := ts.Store.(*postgres.Store).Pool()

	// Rolled back: no job, and no wake-up.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op once committed or rolled back
	rolled, err := c.InsertTx(ctx, tx, echoArgs{Message: "rolled back"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = c.JobGet(ctx, rolled.ID)
	require.ErrorIs(t, err, pronto.ErrNotFound)

	// Committed: the job exists and the commit's notification wakes the client at once.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op once committed
	j, err := c.InsertTx(ctx, tx, echoArgs{Message: "committed"}, nil)
	require.NoError(t, err)
	select {
	case m := <-ran:
		t.Fatalf("job %q ran before its transaction committed", m)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case m := <-ran:
		require.Equal(t, "committed", m)
	case <-time.After(10 * time.Second):
		t.Fatal("committed job never ran: its notification was not delivered")
	}
	waitState(t, c, j.ID, pronto.StateCompleted)
	select {
	case m := <-ran:
		t.Fatalf("unexpected run of %q", m)
	case <-time.After(100 * time.Millisecond):
	}

	// InsertSQLTx is refused on PostgreSQL with a clear error.
	_, err = c.InsertSQLTx(ctx, nil, echoArgs{}, nil)
	require.ErrorIs(t, err, pronto.ErrUnsupported)
}

func TestLostNotificationIsCoveredByPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, _, ran := startReportingClient(t, 300*time.Millisecond, func(j *pronto.Job[echoArgs]) string { return j.ID })
	// Insert behind pronto's back: a plain INSERT sends no notification.
	id := uuidv7.New()
	_, err := testdb.Pool(t).Exec(ctx, `INSERT INTO `+ts.schema+`.jobs (id, kind, queue, args, state, max_attempts)
		VALUES ($1, 'test.echo', 'default', '[{"message":"quiet"}]', 'available', 3)`, id)
	require.NoError(t, err)
	select {
	case got := <-ran:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a job inserted without a notification was never picked up by the poll")
	}
}

func TestListenerKilledDispatchRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Recovery must come from the listener, not the poll.
	ts, c, ran := startReportingClient(t, time.Hour, func(j *pronto.Job[echoArgs]) string { return j.Args.Message })
	st := ts.Store.(*postgres.Store)

	_, err := c.Insert(ctx, echoArgs{Message: "before"}, nil)
	require.NoError(t, err)
	require.Equal(t, "before", <-ran)

	pid := st.ListenerPID()
	require.NotZero(t, pid)
	_, err = testdb.Pool(t).Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid))
	require.NoError(t, err)
	require.Eventually(t, func() bool { p := st.ListenerPID(); return p != 0 && p != pid }, 15*time.Second, 20*time.Millisecond,
		"the listener reconnects by itself")

	_, err = c.Insert(ctx, echoArgs{Message: "after"}, nil)
	require.NoError(t, err)
	select {
	case m := <-ran:
		require.Equal(t, "after", m)
	case <-time.After(10 * time.Second):
		t.Fatal("dispatch did not recover after the listener's connection was killed")
	}
}
