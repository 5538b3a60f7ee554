package pronto_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// afterCommitCounter is an insert middleware that counts, through AfterInsertCommit, the new jobs
// of each insert, as promexport does.
type afterCommitCounter struct {
	n atomic.Int64
	// late holds the counts back until flush, which defers them after the insert returned (as a
	// middleware that hands its work to a goroutine may).
	late    bool
	mu      sync.Mutex
	pending []func()
}

func (a *afterCommitCounter) middleware(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
	rows, err := next(ctx, ps)
	count := func() {
		for _, r := range rows {
			if !r.Duplicate {
				a.n.Add(1)
			}
		}
	}
	if !a.late {
		pronto.AfterInsertCommit(ctx, count)
		return rows, err
	}
	a.mu.Lock()
	a.pending = append(a.pending, func() { pronto.AfterInsertCommit(ctx, count) })
	a.mu.Unlock()
	return rows, err
}

// flush defers the counts held back (late).
func (a *afterCommitCounter) flush() {
	a.mu.Lock()
	pending := a.pending
	a.pending = nil
	a.mu.Unlock()
	for _, fn := range pending {
		fn()
	}
}

// TestAfterInsertCommitOutsideAppTxRunsAtOnce: for an insert outside the application's transaction,
// what the middleware defers has run when AfterInsertCommit returns, on every store.
func TestAfterInsertCommitOutsideAppTxRunsAtOnce(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var ran, ranBeforeReturn bool
		c, err := pronto.NewClient(ts.Store, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
			func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
				rows, err := next(ctx, ps)
				pronto.AfterInsertCommit(ctx, func() { ran = true })
				ranBeforeReturn = ran
				return rows, err
			},
		}})
		require.NoError(t, err)
		defer func() { _ = c.Stop(context.Background()) }()
		_, err = c.Insert(ctx, echoArgs{Message: "x"}, nil)
		require.NoError(t, err)
		require.True(t, ranBeforeReturn, "AfterInsertCommit returned before running fn")
	})
}

// TestAfterInsertCommitInAppTx: inside the application's transaction (InsertManyTx on PostgreSQL,
// InsertManySQLTx on SQLite), what the middleware defers runs once the transaction commits and
// never when it rolls back, whether it is deferred during the insert or after the insert returned;
// an insert of duplicates only, which stores nothing, runs it at once (it counts nothing).
func TestAfterInsertCommitInAppTx(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := map[bool]string{false: "deferred during the insert", true: "deferred after the insert"}[late]
		t.Run(name, func(t *testing.T) {
			forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
				ctx := context.Background()
				counter := &afterCommitCounter{late: late}
				c, err := pronto.NewClient(ts.Store, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{counter.middleware}})
				require.NoError(t, err)
				// insertInTx inserts jobs in a transaction of the application and returns the
				// function that ends it.
				insertInTx := func(jobs []pronto.InsertManyParams) (end func(commit bool)) {
					t.Helper()
					switch st := ts.Store.(type) {
					case *postgres.Store:
						tx, err := st.Pool().Begin(ctx)
						require.NoError(t, err)
						_, err = c.InsertManyTx(ctx, tx, jobs)
						require.NoError(t, err)
						counter.flush()
						return func(commit bool) { require.NoError(t, endPgx(ctx, tx, commit)) }
					case *sqlite.Store:
						tx, err := st.DB().BeginTx(ctx, nil)
						require.NoError(t, err)
						_, err = c.InsertManySQLTx(ctx, tx, jobs)
						require.NoError(t, err)
						counter.flush()
						return func(commit bool) { require.NoError(t, endSQL(tx, commit)) }
					default:
						t.Fatalf("store %T has no application transaction", st)
						return nil
					}
				}
				unique := &pronto.InsertOpts{Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}}

				insertInTx([]pronto.InsertManyParams{{Args: echoArgs{Message: "rolled back"}}})(false)
				insertInTx([]pronto.InsertManyParams{{Args: echoArgs{Message: "a"}, Opts: unique}, {Args: echoArgs{Message: "b"}}})(true)
				require.Eventually(t, func() bool { return counter.n.Load() == 2 }, 30*time.Second, 5*time.Millisecond,
					"the committed jobs were never counted")

				// A duplicate only, in a transaction still open: nothing to wait for, nothing counted.
				end := insertInTx([]pronto.InsertManyParams{{Args: echoArgs{Message: "a"}, Opts: unique}})
				defer end(false)

				// Stop ends the commit watches and waits for them: nothing is counted after it.
				require.NoError(t, c.Stop(ctx))
				require.Equal(t, int64(2), counter.n.Load(), "the rolled-back job, or the duplicate, was counted")
			})
		})
	}
}
