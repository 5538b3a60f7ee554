package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/pgbouncertest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// bouncerPool returns a pool of maxConns connections through b, closed when the test ends.
func bouncerPool(t testing.TB, b *pgbouncertest.Bouncer, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// bouncerStore returns a migrated store in schema whose pool goes through b and whose listener
// connects directly, closed when the test ends.
func bouncerStore(t testing.TB, b *pgbouncertest.Bouncer, pool *pgxpool.Pool, schema string) *Store {
	t.Helper()
	s, err := New(pool, Config{Schema: schema, ListenURL: b.DirectURL})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// TestStoreThroughPgBouncer runs the behaviour suite every backend passes with the store's pool
// behind PgBouncer in transaction-pooling mode (pgx's cache_describe mode: no named prepared
// statements) and its listener connected directly.
func TestStoreThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgbouncertest.Start(t)
	pool := bouncerPool(t, b, 8)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return bouncerStore(t, b, pool, testdb.Schema(t)) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return bouncerStore(t, b, bouncerPool(t, b, 2), s.(*Store).Schema())
		},
	})
}
