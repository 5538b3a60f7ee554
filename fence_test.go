package pronto_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

type lapseArgs struct{}

func (lapseArgs) Kind() string { return "test.lapse" }

// lapseLease makes the lease of job id's attempt run out at once, if the job is active on that
// attempt, as a GC pause, a frozen VM or a late heartbeat would, by writing the database directly.
// Naming the attempt keeps it from lapsing a newer run that a concurrent rescue and claim started.
func lapseLease(t *testing.T, ts *testStore, id string, attempt int) {
	t.Helper()
	ctx := context.Background()
	switch ts.kind {
	case kindPostgres:
		_, err := testdb.Pool(t).Exec(ctx, `UPDATE `+pgx.Identifier{ts.schema}.Sanitize()+
			`.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1 AND state = 'active' AND attempt = $2`, id, attempt)
		require.NoError(t, err)
	case kindSQLite:
		db, err := sql.Open("sqlite", "file:"+ts.path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, `UPDATE pronto_jobs SET lease_expires_at = ? WHERE id = ? AND state = 'active' AND attempt = ?`,
			time.Now().Add(-time.Second).UnixMicro(), id, attempt)
		require.NoError(t, err)
	default:
		t.Fatalf("lapseLease: no direct access to a %s store", ts.kind)
	}
}

// TestLapsedLeaseInOneProcess is the in-process fence: a job whose lease lapses while its run goes on
// is rescued and claimed again by the same client. The first run is cancelled with ErrJobLost and
// its outcome is not recorded, the two runs never overlap, and the second run, kept alive by its own
// heartbeats, decides the outcome: completed, on attempt 2.
func TestLapsedLeaseInOneProcess(t *testing.T) {
	for _, kind := range []storeKind{kindSQLite, kindPostgres} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ts := newTestStore(t, kind)
			var (
				inFlight, maxInFlight atomic.Int32
				firstCause            = make(chan error, 1)
				started               = make(chan int, 4)
				finishSecond          = make(chan struct{})
				stopOnce              sync.Once
			)
			t.Cleanup(func() { stopOnce.Do(func() { close(finishSecond) }) })
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[lapseArgs]) error {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					m := maxInFlight.Load()
					if n <= m || maxInFlight.CompareAndSwap(m, n) {
						break
					}
				}
				started <- j.Attempt
				if j.Attempt == 1 {
					<-ctx.Done() // runs until told to stop, as a long job honouring its context does
					firstCause <- context.Cause(ctx)
					return ctx.Err()
				}
				select {
				case <-finishSecond:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}))
			cfg := fastConfig(workers, defaultQueue(50))
			cfg.LeaseDuration = 2 * time.Second
			cfg.HeartbeatInterval = 100 * time.Millisecond
			c := startClient(t, ts, cfg)

			row, err := c.Insert(context.Background(), lapseArgs{}, nil)
			require.NoError(t, err)
			require.Equal(t, 1, <-started)

			// Lapse the lease and rescue until the rescue takes the job back: a heartbeat landing
			// between the two may extend the lease again first.
			require.Eventually(t, func() bool {
				lapseLease(t, ts, row.ID, 1)
				res, err := ts.Rescue(context.Background(), store.RescueParams{Limit: 10})
				require.NoError(t, err)
				for _, j := range res.Requeued {
					if j.ID == row.ID {
						return true
					}
				}
				j, err := ts.GetJob(context.Background(), row.ID)
				require.NoError(t, err)
				return j.Attempt > 1 || j.State == store.StateAvailable // the leader's rescuer was first
			}, 15*time.Second, 20*time.Millisecond)

			select {
			case cause := <-firstCause:
				require.ErrorIs(t, cause, pronto.ErrJobLost, "the superseded run is stopped as lost")
			case <-time.After(20 * time.Second):
				t.Fatal("the first run was never cancelled after its job was claimed again")
			}
			select {
			case a := <-started:
				require.Equal(t, 2, a)
			case <-time.After(20 * time.Second):
				t.Fatal("the job was never run again")
			}
			stopOnce.Do(func() { close(finishSecond) })

			done := waitState(t, c, row.ID, pronto.StateCompleted)
			require.Equal(t, 2, done.Attempt, "attempt 2 decided the outcome")
			var lapsed int
			for _, e := range done.Errors {
				if e.Type == "lease_expired" {
					lapsed++
				}
			}
			require.Equal(t, 1, lapsed, "one lease lapsed, once: %+v", done.Errors)
			require.Equal(t, int32(1), maxInFlight.Load(), "two runs of one job overlapped in one process")
		})
	}
}

type badTextArgs struct{}

func (badTextArgs) Kind() string { return "test.bad_text" }

// TestWorkerErrorTextNoStoreCanHold: a worker's error with a NUL and invalid UTF-8 in it still
// decides its job on every store, its text stored with both made visible.
func TestWorkerErrorTextNoStoreCanHold(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[badTextArgs]) error {
			return errors.New("boom\x00 \xff")
		}))
		c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(1)))
		row, err := c.Insert(context.Background(), badTextArgs{}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		j := waitState(t, c, row.ID, pronto.StateDiscarded)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "boom\u2400 \ufffd", j.Errors[0].Message)
	})
}
