package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

// TestProbeWritableReadOnlySessions: on a pool whose sessions start read-only transactions
// (default_transaction_read_only, as ALTER SYSTEM or ALTER ROLE set it), a read passes and every
// write fails with 25006; ProbeWritable says so (ErrReadOnly, condition read_only), and says nothing
// on a writable pool of the same database.
func TestProbeWritableReadOnlySessions(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	rw := newStore(t, testdb.NewPool(t, 2), schema)
	require.NoError(t, store.ProbeWritable(ctx, rw))

	ro, err := New(testdb.NewPoolWith(t, 2, map[string]string{"default_transaction_read_only": "on"}), Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ro.Close()) })
	_, err = ro.GetJob(ctx, "00000000-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, store.ErrNotFound, "a read passes on a read-only session")
	_, err = ro.Insert(ctx, []*store.InsertParams{params("q")})
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe) && pe.Code == "25006", "a write fails read-only: %v", err)

	err = store.ProbeWritable(ctx, ro) // as the server asks it
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.Equal(t, store.ConditionReadOnly, store.ConditionOf(ro, err))
	require.True(t, store.IsUnavailable(ro, err))
	require.ErrorContains(t, err, "default_transaction_read_only")
}
