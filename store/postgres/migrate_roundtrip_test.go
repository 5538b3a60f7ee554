package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
)

// countingTracer counts the statements a pool's connections send, and the statements they prepare.
type countingTracer struct{ queries, prepares atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}

func (c *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestNewerMigrationsIsOneStatement: every started client's schema watch calls NewerMigrations every
// few seconds, so it takes one statement (once prepared), with the same answers as before on a
// schema never migrated, on a migrated one, and on one whose migrations table predates the marks.
func TestNewerMigrationsIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	require.NoError(t, err)
	cfg.MaxConns = 1
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(testdb.Unreachable(err))
	}
	t.Cleanup(pool.Close)
	s, err := New(pool, Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)

	// statements calls NewerMigrations twice (the first prepares its statement) and returns what the
	// second answered, how many statements it sent and how many it prepared: on a schema never
	// migrated, the statement's preparation is its one exchange, which fails as undefined_table.
	statements := func() (compatible, incompatible []int, n, prepared int64) {
		t.Helper()
		_, _, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		q, p := tracer.queries.Load(), tracer.prepares.Load()
		c, i, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		for _, m := range c {
			compatible = append(compatible, m.Version)
		}
		for _, m := range i {
			incompatible = append(incompatible, m.Version)
		}
		return compatible, incompatible, tracer.queries.Load() - q, tracer.prepares.Load() - p
	}

	c, i, n, _ := statements()
	require.Empty(t, c, "a schema never migrated has no newer migrations")
	require.Empty(t, i)
	require.EqualValues(t, 1, n)

	require.NoError(t, s.Migrate(ctx))
	markNewer(t, s, true, 998)
	markNewer(t, s, false, 999)
	c, i, n, p := statements()
	require.Equal(t, []int{998}, c)
	require.Equal(t, []int{999}, i)
	require.EqualValues(t, 1, n)
	require.Zero(t, p, "the statement is prepared once")

	// A table of a binary that predates the marks: the same statement, every newer one unmarked.
	_, err = pool.Exec(ctx, s.expand.Replace(`ALTER TABLE {schema}.schema_migrations DROP COLUMN older_binaries_ok`))
	require.NoError(t, err)
	c, i, n, p = statements()
	require.Empty(t, c)
	require.Equal(t, []int{998, 999}, i)
	require.EqualValues(t, 1, n)
	require.Zero(t, p, "the statement is prepared once")
}
