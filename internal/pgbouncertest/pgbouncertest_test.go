package pgbouncertest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// queryErrors runs the same parameterized statement from 8 goroutines over a pool of 8
// connections through b in pgx's query mode, and returns the errors by message.
func queryErrors(t *testing.T, b *Bouncer, mode string) map[string]int {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(strings.Replace(b.URL, "cache_describe", mode, 1))
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = map[string]int{}
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				var n int
				if err := pool.QueryRow(context.Background(), "SELECT $1::int + length($2::text)", i, "ab").Scan(&n); err != nil {
					mu.Lock()
					errs[err.Error()]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// TestQueryModes is the measurement behind docs/pgbouncer.md: through PgBouncer in transaction
// mode, pgx's cache_describe and describe_exec modes (unnamed statements only) work from many
// connections at once. The default cache_statement mode prepares named statements per session,
// which PgBouncer before 1.21 (or with max_prepared_statements = 0) hands to other clients; its
// errors are logged, not asserted, since a newer PgBouncer may track them.
func TestQueryModes(t *testing.T) {
	t.Parallel()
	b := Start(t)
	for _, mode := range []string{"cache_describe", "describe_exec"} {
		require.Empty(t, queryErrors(t, b, mode), "mode %s", mode)
	}
	t.Logf("cache_statement through this PgBouncer: %v", queryErrors(t, b, "cache_statement"))
}
