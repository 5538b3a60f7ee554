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
// mode, pgx's cache_describe mode (the one pronto uses) works from many connections at once: each
// statement goes as one Parse/Bind/Execute/Sync of the unnamed statement, which PgBouncer never
// splits between server connections. The other modes' errors are logged, not asserted: the default
// cache_statement prepares named statements per session, which PgBouncer before 1.21 (or with
// max_prepared_statements = 0) hands to other clients; describe_exec describes the unnamed
// statement in one round trip and executes it in the next, and PgBouncer may give the server
// connection to another client in between, so it fails now and then (26000), depending on timing.
func TestQueryModes(t *testing.T) {
	t.Parallel()
	b := Start(t)
	require.Empty(t, queryErrors(t, b, "cache_describe"), "mode cache_describe")
	for _, mode := range []string{"describe_exec", "cache_statement"} {
		t.Logf("%s through this PgBouncer: %v", mode, queryErrors(t, b, mode))
	}
}
