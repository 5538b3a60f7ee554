package postgres

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestInsertPgxTxRefusedKeepsTxUsable: a plain batch refused inside the application's transaction (a
// duplicate id) keeps nothing of itself and leaves the transaction usable, as the SQLite store's
// InsertSQLTx does, on each way a plain batch is written (pipelined INSERTs, one INSERT of arrays,
// COPY); what the transaction did before and after it commits.
func TestInsertPgxTxRefusedKeepsTxUsable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	existing := params("q")
	_, err := s.Insert(ctx, []*store.InsertParams{existing})
	require.NoError(t, err)

	for _, n := range []int{1, arraysMin, arraysMax + 1} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			tx, err := s.Pool().Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			before := params("q")
			_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{before})
			require.NoError(t, err)

			batch := make([]*store.InsertParams, n)
			for i := range batch {
				batch[i] = params("q")
			}
			dup := *existing
			batch[n-1] = &dup
			_, err = s.InsertPgxTx(ctx, tx, batch)
			require.ErrorIs(t, err, store.ErrDuplicate)
			// Twice: the first failure left no savepoint for the second to go back to.
			_, err = s.InsertPgxTx(ctx, tx, batch)
			require.ErrorIs(t, err, store.ErrDuplicate)

			after := params("q")
			_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{after})
			require.NoError(t, err, "the transaction is still usable")
			require.NoError(t, tx.Commit(ctx))
			for _, p := range []*store.InsertParams{before, after} {
				_, err = s.GetJob(ctx, p.ID)
				require.NoError(t, err, "what the transaction did around the refused batch is kept")
			}
			for _, p := range batch[:n-1] {
				_, err = s.GetJob(ctx, p.ID)
				require.ErrorIs(t, err, store.ErrNotFound, "nothing of the refused batch is kept")
			}
		})
	}
}

// TestInsertPgxTxAbortedStaysAborted: an insert into a transaction that a failed statement of the
// application aborted already fails, and does not make the transaction usable again (it undoes no
// savepoint it did not open): the transaction still rolls back as a whole.
func TestInsertPgxTxAbortedStaysAborted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	first := params("q")
	_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{first})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)
	_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{params("q")})
	require.Error(t, err)
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
	_, err = s.GetJob(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}
