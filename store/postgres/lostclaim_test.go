package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/cutproxy"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/testlog"
	"github.com/pronto-jobs/pronto/store"
)

// TestLostClaimReplyReturnsItsJobs loses the reply of a claim that commits: the claim waits for a
// lock the test holds, the network between the store and the database is cut (its connections
// dropped, new ones refused, pgx's cancel request too), and the lock is let go, so the claim's
// backend goes on and commits. Once the network is back, the jobs the claim took, each with one
// attempt, must come back available with the attempt refunded (as a shutdown gives it back:
// MaxAttempts one more), not stay active until the rescue discards them at their lease's end (a minute here, beyond the wait). Each claim path (plain, fair
// across tenants, rate-limited) tags its tokens.
func TestLostClaimReplyReturnsItsJobs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		job  func(p *store.InsertParams)
		// lock is the statement whose lock holds the claim: the first one its path runs takes.
		lock string
	}{
		{"plain", func(*store.InsertParams) {}, `LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE`},
		{"fair", func(p *store.InsertParams) { p.Tenant = "t1" }, `LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE`},
		{"rate limited", func(p *store.InsertParams) {
			p.RateKey, p.RateLimit = "k", &store.RateLimit{MaxActive: 100}
		}, `SELECT 1 FROM {schema}.rate_limits WHERE key = 'k' FOR UPDATE`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var logs testlog.Buffer
			proxy := cutproxy.New(t, testdb.Addr(t))
			direct := testdb.NewPool(t, 2)
			s, err := New(testdb.NewPoolAt(t, proxy.Addr(), 4),
				Config{Schema: testdb.Schema(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			require.NoError(t, s.Migrate(ctx))

			insert := func(n int) []string {
				ps := make([]*store.InsertParams, n)
				for i := range ps {
					ps[i] = params("q")
					ps[i].MaxAttempts = 1
					c.job(ps[i])
				}
				_, err := s.Insert(ctx, ps)
				require.NoError(t, err)
				return paramIDs(ps)
			}
			// A first claim, answered: the fair path is then the queue's first (see fairQueues).
			first := insert(1)
			warm, err := s.Claim(ctx, claimParams("q", 10))
			require.NoError(t, err)
			require.Equal(t, first, ids(warm))
			want := insert(3)

			locker, err := direct.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = locker.Rollback(ctx) }()
			_, err = locker.Exec(ctx, s.expand.Replace(c.lock))
			require.NoError(t, err)

			claimed := make(chan error, 1)
			go func() {
				jobs, err := s.Claim(ctx, claimParams("q", 10))
				if err == nil {
					t.Errorf("the claim answered %d jobs through a cut connection", len(jobs))
				}
				claimed <- err
			}()
			waitForLockWait(t, direct, s.schema)
			proxy.Cut()
			require.Error(t, <-claimed)
			require.NoError(t, locker.Commit(ctx))
			proxy.Mend()

			require.Eventually(t, func() bool {
				for _, id := range want {
					j, err := s.GetJob(ctx, id)
					if err != nil || j.State != store.StateAvailable || j.MaxAttempts-j.Attempt != 1 {
						return false
					}
				}
				return true
			}, 30*time.Second, 10*time.Millisecond, "the lost claim's jobs come back, attempts refunded")
			// The recovery logs once its give-back committed: the jobs can be seen back just before.
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "reply was lost") },
				30*time.Second, 10*time.Millisecond, "the claim committed, and the store returned its jobs")
			require.Contains(t, logs.String(), "jobs=3")

			again, err := s.Claim(ctx, claimParams("q", 10))
			require.NoError(t, err)
			require.ElementsMatch(t, want, ids(again))
			for _, j := range again {
				// The refund kept the attempt count and gave the attempt back to the budget.
				require.Equal(t, 2, j.Attempt)
				require.Equal(t, 2, j.MaxAttempts)
			}
		})
	}
}

// TestCancelledClaimTakesNothing: a claim whose caller gives up (its context ends) while it waits
// for a lock is cancelled by pgx and rolls back. Its recovery then finds nothing to return: the
// jobs are available with their attempts untouched, the next claim takes them at attempt 1, and
// the recovery leaves that claim's jobs alone.
func TestCancelledClaimTakesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs testlog.Buffer
	pool := testdb.NewPool(t, 4)
	s, err := New(pool, Config{Schema: testdb.Schema(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	ps := []*store.InsertParams{params("q"), params("q")}
	_, err = s.Insert(ctx, ps)
	require.NoError(t, err)

	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, s.expand.Replace(`LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE`))
	require.NoError(t, err)
	claimCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimed := make(chan error, 1)
	go func() {
		_, err := s.Claim(claimCtx, claimParams("q", 10))
		claimed <- err
	}()
	waitForLockWait(t, pool, s.schema)
	cancel()
	require.ErrorIs(t, <-claimed, context.Canceled)
	require.NoError(t, locker.Commit(ctx))

	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.ElementsMatch(t, paramIDs(ps), ids(jobs), "the cancelled claim took nothing")
	for _, j := range jobs {
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, 3, j.MaxAttempts)
	}
	// The recovery of the cancelled claim, done, left the new claim's jobs alone.
	require.Eventually(t, s.lost.Idle, time.Minute, 10*time.Millisecond, "the recovery ends")
	for _, j := range jobs {
		got, err := s.GetJob(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateActive, got.State)
		require.Equal(t, j.ClaimToken, got.ClaimToken)
	}
	require.NotContains(t, logs.String(), "reply was lost")
}

// waitForLockWait waits until a statement naming schema waits for a lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, schema).Scan(&waiting)
		return err == nil && waiting
	}, time.Minute, 5*time.Millisecond, "the claim waits for the lock")
}
