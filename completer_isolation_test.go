package pronto_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
)

type isolationArgs struct {
	Held bool `json:"held"`
	N    int  `json:"n"`
}

func (isolationArgs) Kind() string { return "completerisolation.job" }

// lockJobRow takes the row lock of one job of schema from a session of its own and keeps it, as an
// operator's SELECT ... FOR UPDATE left open in psql does; the returned function releases it.
func lockJobRow(t *testing.T, schema, id string) func() {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.URL())
	if err != nil {
		t.Fatal(testdb.Unreachable(err))
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, "SELECT 1 FROM "+schema+".jobs WHERE id = $1 FOR UPDATE", id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the job's row is locked")
	released := false
	t.Cleanup(func() {
		if !released {
			_ = tx.Rollback(ctx)
		}
	})
	return func() {
		released = true
		require.NoError(t, tx.Rollback(ctx))
	}
}

// TestLockedOutcomeHoldsNoOtherOutcome: one job's row is held locked by another session for
// minutes, and the client's sessions carry lock_timeout, so writing that job's outcome fails with
// 55P03 every time. That error is temporary (never given up), but it concerns that row only: the
// outcomes of every other job of the client are still written while the lock is held, and the held
// one is written once the lock is gone, its job completed in its first and only run. The completer
// used to retry the whole batch holding the locked outcome, and, writing one batch at a time, held
// every later outcome of the client behind it until the lock went: leases expired and jobs ran
// again.
func TestLockedOutcomeHoldsNoOtherOutcome(t *testing.T) {
	ctx := context.Background()
	st, schema := lockTimeoutStore(t)

	var heldRuns atomic.Int32
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[isolationArgs]) error {
		if job.Args.Held {
			heldRuns.Add(1)
			started <- struct{}{}
			<-release
		}
		return nil
	}))
	logs := &keptLog{}
	c := startClient(t, st, &pronto.Config{
		Queues:            defaultQueue(4),
		Workers:           workers,
		LeaseDuration:     time.Minute, // nothing is rescued during the test, whatever its heartbeats meet
		HeartbeatInterval: time.Second,
		RescueInterval:    100 * time.Millisecond,
		Logger:            slog.New(logs),
	})
	held, err := c.Insert(ctx, isolationArgs{Held: true}, &pronto.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the held job never started")
	}

	unlock := lockJobRow(t, schema, held.ID)
	close(release)
	require.Eventually(t, func() bool { return logs.count("55P03") >= 2 }, 30*time.Second, 10*time.Millisecond,
		"the held job's outcome never met the row lock: %s", logs.dump())

	var others []string
	for i := range 5 {
		j, err := c.Insert(ctx, isolationArgs{N: i}, nil)
		require.NoError(t, err)
		others = append(others, j.ID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range others {
		for {
			j, err := c.JobGet(ctx, id)
			require.NoError(t, err)
			if j.State == pronto.StateCompleted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s's outcome is not written (%s) while another job's row is locked; logs:\n%s", id, j.State, logs.dump())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	j, err := c.JobGet(ctx, held.ID)
	require.NoError(t, err)
	require.Equal(t, pronto.StateActive, j.State, "the held job's outcome cannot be written while its row is locked")

	unlock()
	got := waitState(t, c, held.ID, pronto.StateCompleted)
	require.Equal(t, 1, got.Attempt, "the held job ran again; logs:\n%s", logs.dump())
	require.EqualValues(t, 1, heldRuns.Load())
	require.Zero(t, logs.count("given up"), "an outcome was given up: %s", logs.dump())
}
