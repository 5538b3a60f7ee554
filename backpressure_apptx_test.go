package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// dryRunKey marks the context of an insert that the test's middleware stops once the bounds admitted
// it, before the store: whether an insert would be admitted is then asked without storing anything,
// nor waiting for the SQLite write lock an open transaction holds.
type dryRunKey struct{}

var errAdmitted = errors.New("admitted by the bounds (dry run: not stored)")

// TestBoundsCountOpenAppTransactions: jobs inserted into the application's transaction (InsertTx,
// InsertSQLTx) count against a queue's maximum depth, and a tenant's MaxQueueDepth, until the
// transaction ends. A depth read does not see them before the commit: they used to count only until
// the insert returned, so that every open transaction could fill the whole room and the bound was
// passed once they committed. Every insert rereads the depth; the bound is 5. PostgreSQL: two open
// transactions; SQLite, which allows one writer: one transaction and inserts outside it. A rolled
// back transaction gives its room back; after a commit the store's count takes over.
func TestBoundsCountOpenAppTransactions(t *testing.T) {
	const maxDepth = 5
	for _, bound := range []string{"queue", "tenant"} {
		t.Run(bound, func(t *testing.T) {
			forEachStoreOf(t, []storeKind{kindPostgres, kindSQLite}, func(t *testing.T, ts *testStore) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // no wait can hang the test
				defer cancel()
				dryRun := func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
					if ctx.Value(dryRunKey{}) != nil {
						return nil, errAdmitted
					}
					return next(ctx, ps)
				}
				c, err := pronto.NewClient(ts.Store, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{dryRun}})
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Stop(context.Background()) })
				pronto.SetQueueDepthRecount(c, time.Nanosecond)
				pronto.SetTenantCountRecount(c, time.Nanosecond)
				opts := &pronto.InsertOpts{Queue: "bq"}
				if bound == "queue" {
					require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", maxDepth))
				} else {
					opts.Tenant = "acme"
					require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: maxDepth}))
				}
				jobs := func(n int) []pronto.InsertManyParams {
					out := make([]pronto.InsertManyParams, n)
					for i := range out {
						out[i] = pronto.InsertManyParams{Args: bpArgs{N: i}, Opts: opts}
					}
					return out
				}
				full := func(err error) bool {
					return errors.Is(err, pronto.ErrQueueFull) || errors.Is(err, pronto.ErrTenantLimit)
				}
				// admits reports whether a plain insert of n jobs would be admitted now.
				admits := func(n int) bool {
					_, err := c.InsertMany(context.WithValue(ctx, dryRunKey{}, true), jobs(n))
					require.True(t, errors.Is(err, errAdmitted) || full(err), "insert of %d: %v", n, err)
					return errors.Is(err, errAdmitted)
				}

				// begin opens a transaction of the application's, and insert inserts n jobs into it.
				var begin func() (insert func(n int) error, commit, rollback func() error)
				switch ts.kind {
				case kindPostgres:
					pool := testdb.NewPool(t, 2) // the application's, apart from the store's
					begin = func() (func(int) error, func() error, func() error) {
						tx, err := pool.Begin(ctx)
						require.NoError(t, err)
						// Before the pool closes, which waits for tx: a failed assertion leaves it open.
						t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
						return func(n int) error { _, err := c.InsertManyTx(ctx, tx, jobs(n)); return err },
							func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
					}
				case kindSQLite:
					db := ts.Store.(*sqlite.Store).DB()
					begin = func() (func(int) error, func() error, func() error) {
						tx, err := db.BeginTx(ctx, nil)
						require.NoError(t, err)
						t.Cleanup(func() { _ = tx.Rollback() })
						return func(n int) error { _, err := c.InsertManySQLTx(ctx, tx, jobs(n)); return err },
							tx.Commit, tx.Rollback
					}
				}

				insert1, _, rollback1 := begin()
				require.NoError(t, insert1(3))
				require.False(t, admits(3), "3 jobs admitted while an open transaction holds 3 of the %d allowed", maxDepth)
				require.True(t, admits(2))
				var insert2 func(int) error
				var commit2 func() error
				room := maxDepth // once the first transaction rolled back
				if ts.kind == kindPostgres {
					insert2, commit2, _ = begin()
					require.True(t, full(insert2(3)), "a second open transaction inserted 3 jobs beside the first one's 3")
					require.NoError(t, insert2(2))
					require.False(t, admits(1))
					room -= 2
				}

				// The first transaction rolls back: its room comes back once the client sees it ended.
				require.NoError(t, rollback1())
				require.Eventually(t, func() bool { return admits(room) }, 30*time.Second, 5*time.Millisecond,
					"the rolled-back transaction's room never came back")
				require.False(t, admits(room+1))
				if ts.kind == kindSQLite { // one writer: the second transaction begins once the first ended
					insert2, commit2, _ = begin()
					require.NoError(t, insert2(2))
					require.False(t, admits(4))
				}

				// The second commits: the store's count (2) takes over, nothing is left in flight.
				require.NoError(t, commit2())
				require.Eventually(t, func() bool { return pronto.QueueDepthInFlight(c) == 0 && pronto.TenantInFlight(c) == 0 },
					30*time.Second, 5*time.Millisecond, "jobs counted in flight after every transaction ended")
				require.False(t, admits(4))
				_, err = c.InsertMany(ctx, jobs(3))
				require.NoError(t, err)
				_, err = c.Insert(ctx, bpArgs{N: 99}, opts)
				require.True(t, full(err), "an insert beyond the bound: %v", err)
				depths, err := ts.Store.(store.QueueBounder).QueueDepths(ctx, []string{"bq"})
				require.NoError(t, err)
				require.Equal(t, int64(maxDepth), depths["bq"], "jobs stored, bounded to %d", maxDepth)
			})
		})
	}
}

// TestStopEndsAppTransactionWatch: Stop ends the watch of an open application transaction whose jobs
// count against a bound (it waits for the watches it owns), although the transaction stays open.
func TestStopEndsAppTransactionWatch(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindSQLite}, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", 5))
		opts := &pronto.InsertOpts{Queue: "bq"}
		switch ts.kind {
		case kindPostgres:
			tx, err := testdb.NewPool(t, 1).Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			_, err = c.InsertTx(ctx, tx, bpArgs{N: 1}, opts)
			require.NoError(t, err)
		case kindSQLite:
			tx, err := ts.Store.(*sqlite.Store).DB().BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			_, err = c.InsertSQLTx(ctx, tx, bpArgs{N: 1}, opts)
			require.NoError(t, err)
		}
		require.Equal(t, int64(1), pronto.QueueDepthInFlight(c), "the open transaction's job")
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(ctx) }()
		select {
		case err := <-stopped:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("Stop still waits for the watch of an open transaction")
		}
		require.Zero(t, pronto.QueueDepthInFlight(c), "the stopped watch released the job")
	})
}

// poolHiddenStore is a PostgreSQL store wrapped so that its pool is out of the client's reach (as an
// application's own instrumenting wrapper would leave it): the client cannot look up whether an
// application transaction ended, and falls back to watching for its jobs to be committed.
type poolHiddenStore struct {
	store.Store
	store.PgxTxInserter
	store.QueueBounder
}

// TestBoundsCountAppTransactionsWithoutThePool: when the store keeps its pool to itself, jobs
// inserted into an application transaction still count against the queue's bound until the client
// sees them committed, and then the store's count takes over; a rolled-back transaction's jobs,
// which are never seen, hold their room for the watch's limit (a minute) or until the client stops,
// never less: the bound is met early, not passed.
func TestBoundsCountAppTransactionsWithoutThePool(t *testing.T) {
	ts := newTestStore(t, kindPostgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg := ts.Store.(interface {
		store.Store
		store.PgxTxInserter
		store.QueueBounder
	})
	wrapped := poolHiddenStore{Store: pg, PgxTxInserter: pg, QueueBounder: pg}
	_, hasPool := any(wrapped).(interface{ Pool() *pgxpool.Pool })
	require.False(t, hasPool, "the wrapper must hide the pool")
	c, err := pronto.NewClient(wrapped, nil)
	require.NoError(t, err)
	pronto.SetQueueDepthRecount(c, time.Nanosecond)
	const maxDepth = 5
	require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", maxDepth))
	opts := &pronto.InsertOpts{Queue: "bq"}
	jobs := func(n int) []pronto.InsertManyParams {
		out := make([]pronto.InsertManyParams, n)
		for i := range out {
			out[i] = pronto.InsertManyParams{Args: bpArgs{N: i}, Opts: opts}
		}
		return out
	}
	pool := testdb.NewPool(t, 2) // the application's
	begin := func() pgx.Tx {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}

	committed := begin()
	_, err = c.InsertManyTx(ctx, committed, jobs(3))
	require.NoError(t, err)
	rolledBack := begin()
	_, err = c.InsertManyTx(ctx, rolledBack, jobs(3))
	require.ErrorIs(t, err, pronto.ErrQueueFull, "3 more beside an open transaction's 3 of %d", maxDepth)
	_, err = c.InsertManyTx(ctx, rolledBack, jobs(2))
	require.NoError(t, err)
	require.Equal(t, int64(5), pronto.QueueDepthInFlight(c), "both open transactions' jobs count")

	require.NoError(t, committed.Commit(ctx))
	require.Eventually(t, func() bool { return pronto.QueueDepthInFlight(c) == 2 }, 30*time.Second, 5*time.Millisecond,
		"the committed jobs, once seen, are left to the store's count")
	require.NoError(t, rolledBack.Rollback(ctx))
	_, err = c.Insert(ctx, bpArgs{N: 99}, opts)
	require.ErrorIs(t, err, pronto.ErrQueueFull, "3 stored and 2 of a transaction whose end the client cannot tell")
	require.Equal(t, int64(2), pronto.QueueDepthInFlight(c), "the rolled-back jobs hold their room: their end is not known")

	require.NoError(t, c.Stop(ctx))
	require.Zero(t, pronto.QueueDepthInFlight(c), "Stop ends the watch")
	depths, err := pg.QueueDepths(ctx, []string{"bq"})
	require.NoError(t, err)
	require.Equal(t, int64(3), depths["bq"], "the committed transaction's jobs only")
}
