package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

// lockedRunningJobs claims n jobs for worker w in a fresh store on sessions with the given
// lock_timeout ("" for none), and opens another session holding the first job's row lock (an
// operator's SELECT ... FOR UPDATE left open), released when the test ends.
func lockedRunningJobs(t *testing.T, lockTimeout string, n int) (*Store, []*store.Job, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	schema := testdb.Schema(t)
	cfg := testdb.Pool(t).Config()
	cfg.MaxConns = 3
	if lockTimeout != "" {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = lockTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := newStore(t, pool, schema)
	for range n {
		_, err := s.Insert(ctx, []*store.InsertParams{params("hb-lock")})
		require.NoError(t, err)
	}
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "hb-lock", Limit: n, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, n)

	conn, err := pgx.Connect(ctx, testdb.URL())
	if err != nil {
		t.Fatal(testdb.Unreachable(err))
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+schema+".jobs WHERE id = $1 FOR UPDATE", jobs[0].ID)
	require.NoError(t, err)
	return s, jobs, tx
}

func heartbeatAll(ctx context.Context, s *Store, jobs []*store.Job, tokens []string) ([]string, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return s.Heartbeat(ctx, store.HeartbeatParams{IDs: ids, Tokens: tokens, WorkerID: "w", LeaseDuration: time.Hour})
}

// TestHeartbeatPastLockedRow: another session holds one running job's row lock. The heartbeat
// extends the other jobs' leases and reports none lost, the locked one included (it is only not
// extended this time). Before, with a lock_timeout the whole heartbeat failed with 55P03, and
// without one it waited for the lock for good: every job of the worker lost its lease.
func TestHeartbeatPastLockedRow(t *testing.T) {
	for _, lt := range []string{"200ms", ""} {
		t.Run("lock_timeout="+lt, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, jobs, _ := lockedRunningJobs(t, lt, 4)
			tokens := make([]string, len(jobs))
			for i, j := range jobs {
				tokens[i] = j.ClaimToken
			}
			lost, err := heartbeatAll(ctx, s, jobs, tokens)
			require.NoError(t, err)
			require.Empty(t, lost)
			for i, j := range jobs {
				var lease time.Time
				require.NoError(t, s.pool.QueryRow(ctx, "SELECT lease_expires_at FROM "+s.schema+".jobs WHERE id = $1", j.ID).Scan(&lease))
				if i == 0 {
					require.Less(t, time.Until(lease), 2*time.Minute, "the locked job's lease was extended")
				} else {
					require.Greater(t, time.Until(lease), 50*time.Minute, "job %d's lease was not extended", i)
				}
			}
		})
	}
}

// TestHeartbeatPastLockedRowFences: fencing stays exact with a row locked elsewhere: a job whose
// claim token does not match, or that another worker holds, is reported lost whether or not its
// row is the locked one.
func TestHeartbeatPastLockedRowFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, jobs, _ := lockedRunningJobs(t, "", 4)
	tokens := make([]string, len(jobs))
	for i, j := range jobs {
		tokens[i] = j.ClaimToken
	}
	// The locked job (0) and an unlocked one (2) under a stale claim.
	tokens[0] = "00000000-0000-7000-8000-000000000000"
	tokens[2] = "00000000-0000-7000-8000-000000000001"
	lost, err := heartbeatAll(ctx, s, jobs, tokens)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{jobs[0].ID, jobs[2].ID}, lost)

	// Another worker's: all lost, locked or not.
	ids := []string{jobs[0].ID, jobs[1].ID}
	lost, err = s.Heartbeat(ctx, store.HeartbeatParams{IDs: ids, WorkerID: "other", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.ElementsMatch(t, ids, lost)
}

// TestFinishPastLockedRowBounded: with no lock_timeout on the client's sessions, a Finish of a job
// whose row another session holds fails within the store's own bound (finishLockTimeout) with
// 55P03, instead of waiting for the lock for good and stalling every later outcome; the completer
// then isolates that outcome. The other jobs' outcomes apply, and nothing of the failed batch was
// written: sent again, each outcome is applied once it can be, never reported "not applied"
// because of the failed attempt.
func TestFinishPastLockedRowBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, jobs, locker := lockedRunningJobs(t, "", 3)
	done := func(j *store.Job) store.Completion {
		return store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
	}
	start := time.Now()
	_, err := s.Finish(ctx, []store.Completion{done(jobs[0]), done(jobs[1])})
	require.Error(t, err, "the finish of a locked row must fail, not wait")
	require.Contains(t, err.Error(), "55P03")
	require.Less(t, time.Since(start), 8*time.Second+5*time.Second)

	// The batch was rolled back whole: job 1 is still active and its outcome applies alone.
	res, err := s.Finish(ctx, []store.Completion{done(jobs[1]), done(jobs[2])})
	require.NoError(t, err)
	require.True(t, res[0].Applied && res[1].Applied, "%+v", res)

	// Once the lock is gone, the locked job's outcome applies on its retry.
	require.NoError(t, locker.Rollback(ctx))
	res, err = s.Finish(ctx, []store.Completion{done(jobs[0])})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
}

// TestFinishKeepsShorterLockTimeout: the bound only shortens the wait: a session's own shorter
// lock_timeout still applies.
func TestFinishKeepsShorterLockTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, jobs, _ := lockedRunningJobs(t, "100ms", 1)
	start := time.Now()
	_, err := s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: jobs[0].Attempt, Token: jobs[0].ClaimToken, State: store.StateCompleted}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "55P03")
	require.Less(t, time.Since(start), 3*time.Second)
}
