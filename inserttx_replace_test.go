package pronto_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestUniqueReplaceInAppTxReportedAfterCommit: a unique job inserted in the application's
// transaction (InsertTx on PostgreSQL, InsertSQLTx on SQLite) that replaces a waiting job reports
// that job's cancel, as Insert does, once the transaction commits, and never when it rolls back.
// It used to report nothing either way: EventCancelled and the cancel metrics missed the job.
func TestUniqueReplaceInAppTxReportedAfterCommit(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		events, unsub := c.Subscribe(pronto.EventCancelled)
		defer unsub()

		// insertInTx inserts args with opts in a transaction of the application and ends it.
		insertInTx := func(args echoArgs, opts *pronto.InsertOpts, commit bool) *pronto.JobRow {
			t.Helper()
			var (
				row *pronto.JobRow
				end func() error
			)
			switch st := ts.Store.(type) {
			case *postgres.Store:
				tx, err := st.Pool().Begin(ctx)
				require.NoError(t, err)
				row, err = c.InsertTx(ctx, tx, args, opts)
				require.NoError(t, err)
				end = func() error { return endPgx(ctx, tx, commit) }
			case *sqlite.Store:
				tx, err := st.DB().BeginTx(ctx, nil)
				require.NoError(t, err)
				row, err = c.InsertSQLTx(ctx, tx, args, opts)
				require.NoError(t, err)
				end = func() error { return endSQL(tx, commit) }
			default:
				t.Fatalf("store %T has no application transaction", st)
			}
			require.NoError(t, end())
			return row
		}

		replace := &pronto.InsertOpts{Queue: "apptx-replace", Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueReplace}}
		first, err := c.Insert(ctx, echoArgs{Message: "x"}, replace)
		require.NoError(t, err)

		// Rolled back: first stays as it was, and nothing is reported.
		insertInTx(echoArgs{Message: "x"}, replace, false)
		got, err := c.JobGet(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, got.State)

		// Committed: first is cancelled, and its cancel reported once.
		insertInTx(echoArgs{Message: "x"}, replace, true)
		select {
		case ev := <-events:
			require.Equal(t, first.ID, ev.Job.ID, "the reported cancel is of the replaced job")
			require.Equal(t, pronto.StateCancelled, ev.Job.State)
		case <-time.After(30 * time.Second):
			t.Fatal("the cancel of the job a committed InsertTx replaced was never reported")
		}
		got, err = c.JobGet(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCancelled, got.State)
		// No second report, and none for the rolled-back replace: an insert through Insert, whose
		// report is synchronous, marks the end of the stream.
		marker, err := c.Insert(ctx, echoArgs{Message: "marker"}, replace)
		require.NoError(t, err)
		_, err = c.Insert(ctx, echoArgs{Message: "marker"}, replace)
		require.NoError(t, err)
		ev := <-events
		require.Equal(t, marker.ID, ev.Job.ID, "a second report came for the replaced job, or one for the rolled-back replace")
	})
}

func endPgx(ctx context.Context, tx pgx.Tx, commit bool) error {
	if commit {
		return tx.Commit(ctx)
	}
	return tx.Rollback(ctx)
}

func endSQL(tx *sql.Tx, commit bool) error {
	if commit {
		return tx.Commit()
	}
	return tx.Rollback()
}
