package pronto_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
)

type heartbeatLockArgs struct {
	N int `json:"n"`
}

func (heartbeatLockArgs) Kind() string { return "heartbeatlock.job" }

// heartbeatLockStore is a migrated PostgreSQL store in a schema of its own on sessions with the
// given lock_timeout ("" for none).
func heartbeatLockStore(t *testing.T, lockTimeout string) (*postgres.Store, string) {
	t.Helper()
	params := map[string]string{}
	if lockTimeout != "" {
		params["lock_timeout"] = lockTimeout
	}
	schema := testdb.Schema(t)
	st, err := postgres.New(sessionPool(t, params), postgres.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	t.Cleanup(func() { _ = st.Close() })
	return st, schema
}

// heartbeatLockRun runs n jobs that block until released; each records whether its context was
// cancelled (its lease reported lost) by the time it is released.
type heartbeatLockRun struct {
	runs     sync.Map // job id -> *atomic.Int32
	started  chan string
	release  sync.Map // job id -> chan struct{}
	canceled atomic.Int32
}

func (r *heartbeatLockRun) gate(id string) chan struct{} {
	ch, _ := r.release.LoadOrStore(id, make(chan struct{}))
	return ch.(chan struct{})
}

func (r *heartbeatLockRun) workers() *pronto.Workers {
	w := pronto.NewWorkers()
	pronto.AddWorker(w, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[heartbeatLockArgs]) error {
		n, _ := r.runs.LoadOrStore(job.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		r.started <- job.ID
		<-r.gate(job.ID)
		if ctx.Err() != nil {
			r.canceled.Add(1)
		}
		return nil
	}))
	return w
}

// leaseOf reads a job's lease without waiting for its row lock.
func leaseOf(t *testing.T, st *postgres.Store, schema, id string) time.Time {
	t.Helper()
	var lease time.Time
	require.NoError(t, st.Pool().QueryRow(context.Background(),
		"SELECT lease_expires_at FROM "+schema+".jobs WHERE id = $1", id).Scan(&lease))
	return lease
}

// TestHeartbeatLockOneRowKeepsOtherLeases: another session holds one running job's row lock (an
// operator's SELECT ... FOR UPDATE left open). The client's heartbeats go on extending the other
// jobs' leases, and the locked job is not reported lost (its context is not cancelled): it is only
// not extended while locked. Every job completes in its first and only run. Before, the heartbeat
// failed whole with 55P03 (with a lock_timeout) or waited for good (without): the other jobs'
// leases ran out and they were rescued and run again.
func TestHeartbeatLockOneRowKeepsOtherLeases(t *testing.T) {
	for _, lt := range []string{"200ms", ""} {
		t.Run("lock_timeout="+lt, func(t *testing.T) {
			ctx := context.Background()
			st, schema := heartbeatLockStore(t, lt)
			r := &heartbeatLockRun{started: make(chan string, 8)}
			const lease = 4 * time.Second
			c := startClient(t, st, &pronto.Config{
				Queues:            defaultQueue(4),
				Workers:           r.workers(),
				LeaseDuration:     lease,
				HeartbeatInterval: 200 * time.Millisecond,
				RescueInterval:    100 * time.Millisecond,
				Logger:            slog.New(&keptLog{}),
			})
			var ids []string
			for i := range 4 {
				j, err := c.Insert(ctx, heartbeatLockArgs{N: i}, &pronto.InsertOpts{MaxAttempts: 3})
				require.NoError(t, err)
				ids = append(ids, j.ID)
			}
			for range ids {
				select {
				case <-r.started:
				case <-time.After(30 * time.Second):
					t.Fatal("the jobs never all started")
				}
			}

			locked := ids[0]
			lockedAt := time.Now()
			unlock := lockJobRow(t, schema, locked)
			// The other jobs' leases are extended past what they were when the lock was taken.
			// Before the fix no heartbeat got through: they stayed below lockedAt+lease until
			// rescued.
			require.Eventually(t, func() bool {
				for _, id := range ids[1:] {
					if !leaseOf(t, st, schema, id).After(lockedAt.Add(lease + time.Second)) {
						return false
					}
				}
				return true
			}, 20*time.Second, 20*time.Millisecond, "the other jobs' leases were not extended past the lock")
			// The locked job's lease was taken before the lock: it has not run out yet.
			require.True(t, leaseOf(t, st, schema, locked).After(time.Now()), "test too slow: the locked job's lease ran out")
			unlock()

			for _, id := range ids {
				close(r.gate(id))
			}
			for _, id := range ids {
				got := waitState(t, c, id, pronto.StateCompleted)
				require.Equal(t, 1, got.Attempt, "job %s was rescued", id)
				n, _ := r.runs.Load(id)
				require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "job %s ran again", id)
			}
			require.Zero(t, r.canceled.Load(), "a job's lease was reported lost")
		})
	}
}

// TestHeartbeatLockFinishDoesNotStall: with no lock_timeout on the client's sessions, the outcome
// of a job whose row another session holds does not stall the outcomes of the other jobs: the
// finish waits for the row lock only a bounded time, the completer sets the outcome aside, and the
// other jobs complete while the lock is held. Once it is released the held outcome is written: its
// job completes in its first run. Before, the finish waited for the lock for good.
func TestHeartbeatLockFinishDoesNotStall(t *testing.T) {
	ctx := context.Background()
	st, schema := heartbeatLockStore(t, "")
	r := &heartbeatLockRun{started: make(chan string, 8)}
	c := startClient(t, st, &pronto.Config{
		Queues:            defaultQueue(4),
		Workers:           r.workers(),
		LeaseDuration:     2 * time.Minute, // nothing is rescued during the test
		HeartbeatInterval: time.Second,
		RescueInterval:    100 * time.Millisecond,
		Logger:            slog.New(&keptLog{}),
	})
	var ids []string
	for i := range 4 {
		j, err := c.Insert(ctx, heartbeatLockArgs{N: i}, &pronto.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	for range ids {
		select {
		case <-r.started:
		case <-time.After(30 * time.Second):
			t.Fatal("the jobs never all started")
		}
	}
	unlock := lockJobRow(t, schema, ids[0])
	close(r.gate(ids[0])) // its outcome meets the lock first
	for _, id := range ids[1:] {
		close(r.gate(id))
	}
	for _, id := range ids[1:] {
		waitCompletedLong(t, c, id)
	}
	unlock()
	got := waitCompletedLong(t, c, ids[0])
	require.Equal(t, 1, got.Attempt)
	for _, id := range ids {
		n, _ := r.runs.Load(id)
		require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "job %s ran again", id)
	}
}

// waitCompletedLong waits for a job to complete for longer than waitState: an outcome set aside
// is tried again after a few bounded lock waits.
func waitCompletedLong(t *testing.T, c *pronto.Client, id string) *pronto.JobRow {
	t.Helper()
	var last *pronto.JobRow
	require.Eventually(t, func() bool {
		j, err := c.JobGet(context.Background(), id)
		require.NoError(t, err)
		last = j
		return j.State == pronto.StateCompleted
	}, 90*time.Second, 20*time.Millisecond, "job %s never completed", id)
	return last
}
