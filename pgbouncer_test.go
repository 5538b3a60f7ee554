package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/pgbouncertest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// bouncerStore returns a migrated store in schema whose pool goes through PgBouncer (transaction
// pooling) and whose listener connects directly, as docs/pgbouncer.md sets it up.
func bouncerStore(t *testing.T, b *pgbouncertest.Bouncer, schema string) *postgres.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.URL) // cache_describe: no named prepared statements
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.Config{Schema: schema, ListenURL: b.DirectURL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(context.Background()))
	return s
}

// TestClientThroughPgBouncer: inserts of every size (pipelined, arrays, COPY, in the application's
// transaction) and claims go through PgBouncer, and every job is picked up through the direct
// listener: the poll is an hour, so only notifications can deliver them.
func TestClientThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := pgbouncertest.Start(t)
	s := bouncerStore(t, b, testdb.Schema(t))

	log := newRunLog()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
		log.add(j.ID)
		return nil
	}))
	cfg := fastConfig(workers, defaultQueue(20))
	cfg.PollInterval = time.Hour
	c := startClient(t, s, cfg)
	// A second client (another process's pool and listener) shares the work.
	other := startClient(t, bouncerStore(t, b, s.Schema()), cfg)

	_, err := c.Insert(ctx, echoArgs{Message: "one"}, nil)
	require.NoError(t, err)
	total := 1
	for _, n := range []int{5, 50, 600} { // pipelined, arrays, COPY
		batch := make([]pronto.InsertManyParams, n)
		for i := range batch {
			batch[i] = pronto.InsertManyParams{Args: echoArgs{N: i}}
		}
		_, err := other.InsertMany(ctx, batch)
		require.NoError(t, err)
		total += n
	}
	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, echoArgs{Message: "tx"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	total++

	require.Eventually(t, func() bool {
		ids, _ := log.snapshot()
		return len(ids) >= total
	}, 60*time.Second, 20*time.Millisecond, "every job is picked up through the listener")
	ids, runs := log.snapshot()
	require.Len(t, ids, total)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran once", id)
	}
}

// TestRescueThroughPgBouncer: the jobs of a client that died holding them (claimed, never
// heartbeated nor finished) are rescued when their leases expire, and run again, through PgBouncer.
func TestRescueThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := pgbouncertest.Start(t)
	s := bouncerStore(t, b, testdb.Schema(t))

	inserter, err := pronto.NewClient(s, nil)
	require.NoError(t, err)
	const n = 10
	batch := make([]pronto.InsertManyParams, n)
	for i := range batch {
		batch[i] = pronto.InsertManyParams{Args: echoArgs{N: i}}
	}
	_, err = inserter.InsertMany(ctx, batch)
	require.NoError(t, err)
	// The dead client: it claimed every job and then vanished.
	dead := bouncerStore(t, b, s.Schema())
	claimed, err := dead.Claim(ctx, store.ClaimParams{Queue: "default", Limit: n, WorkerID: "dead-client", LeaseDuration: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, claimed, n)

	log := newRunLog()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
		log.add(j.ID)
		return nil
	}))
	survivor := startClient(t, s, fastConfig(workers, defaultQueue(5)))
	require.Eventually(t, func() bool {
		qs, err := survivor.QueueList(ctx)
		return err == nil && len(qs) == 1 && qs[0].Counts[pronto.StateCompleted] == n
	}, 60*time.Second, 20*time.Millisecond, "every job of the dead client is rescued and completed")
	list, err := survivor.JobList(ctx, &pronto.JobListParams{Limit: n})
	require.NoError(t, err)
	for _, j := range list.Jobs {
		require.Equal(t, 2, j.Attempt)
		require.NotEmpty(t, j.Errors)
		require.Equal(t, "lease_expired", j.Errors[0].Type)
	}
}
