package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/pgcluster"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// persistence reads the relpersistence of a table of the store's schema: 'p' logged, 'u' unlogged.
func persistence(t *testing.T, s *Store, table string) string {
	t.Helper()
	var p string
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT relpersistence::text FROM pg_class WHERE oid = $1::regclass`, s.schema+"."+table).Scan(&p))
	return p
}

// TestSetUnlogged: the jobs table and the progress table that references it turn UNLOGGED and back,
// keeping their rows; the other tables stay logged; jobs go through their whole life either way.
func TestSetUnlogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	on, err := s.Unlogged(ctx)
	require.NoError(t, err)
	require.False(t, on, "logged by default")

	kept := params("unlogged")
	_, err = s.Insert(ctx, []*store.InsertParams{kept})
	require.NoError(t, err)
	for _, want := range []bool{true, true, false, false} { // twice each: setting it again is harmless
		require.NoError(t, s.SetUnlogged(ctx, want))
		on, err := s.Unlogged(ctx)
		require.NoError(t, err)
		require.Equal(t, want, on)
		p := map[bool]string{true: "u", false: "p"}[want]
		require.Equal(t, p, persistence(t, s, "jobs"))
		require.Equal(t, p, persistence(t, s, "progress"), "progress references jobs and follows it")
		require.Equal(t, "p", persistence(t, s, "cron"), "schedules stay logged")
		require.Equal(t, "p", persistence(t, s, "queues"), "queue settings stay logged")
		require.Equal(t, store.StateAvailable, mustGet(t, s, kept.ID).State, "the rewrite keeps the rows")

		p1 := params("unlogged-life")
		_, err = s.Insert(ctx, []*store.InsertParams{p1})
		require.NoError(t, err)
		claimed, err := s.Claim(ctx, store.ClaimParams{Queue: p1.Queue, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		v := 0.5
		ok, err := s.SetProgress(ctx, store.ProgressParams{ID: p1.ID, Token: claimed[0].ClaimToken, Value: &v})
		require.NoError(t, err)
		require.True(t, ok)
		res, err := s.Finish(ctx, []store.Completion{{ID: p1.ID, Attempt: 1, Token: claimed[0].ClaimToken,
			State: store.StateCompleted, Result: json.RawMessage(`{"ok":true}`)}})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, store.StateCompleted, mustGet(t, s, p1.ID).State)
	}
}

func mustGet(t *testing.T, s *Store, id string) *store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

// TestUnloggedCrashLosesJobs is the trade SetUnlogged documents, on a private server: after a crash
// (immediate shutdown) the jobs of an UNLOGGED table are gone, while cron schedules, which stay
// logged, survive; a logged table keeps its jobs through the same crash.
func TestUnloggedCrashLosesJobs(t *testing.T) {
	ctx := context.Background()
	cl := pgcluster.Start(t)
	open := func(schema string) *Store {
		cfg, err := pgxpool.ParseConfig(cl.URL())
		require.NoError(t, err)
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := New(pool, Config{Schema: schema})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		return s
	}
	lossy, durable := open("lossy"), open("durable")
	require.NoError(t, lossy.SetUnlogged(ctx, true))
	lost, kept := params("q"), params("q")
	_, err := lossy.Insert(ctx, []*store.InsertParams{lost})
	require.NoError(t, err)
	_, err = durable.Insert(ctx, []*store.InsertParams{kept})
	require.NoError(t, err)
	sched := &store.CronSchedule{Name: "nightly", ID: uuidv7.New(), Expression: "0 3 * * *", Timezone: "UTC",
		OverlapPolicy: "allow", Template: json.RawMessage(`{"kind":"k"}`), Enabled: true,
		NextRunAt: time.Now().Add(time.Hour), CreatedAt: time.Now()}
	require.NoError(t, lossy.CronCreate(ctx, sched))

	cl.Restart("immediate")

	lossy, durable = open("lossy"), open("durable")
	_, err = lossy.GetJob(ctx, lost.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "a crash empties an UNLOGGED jobs table")
	on, err := lossy.Unlogged(ctx)
	require.NoError(t, err)
	require.True(t, on, "the table stays UNLOGGED after the crash")
	_, err = lossy.CronGet(ctx, "nightly")
	require.NoError(t, err, "schedules are logged and survive")
	require.Equal(t, store.StateAvailable, mustGet(t, durable, kept.ID).State, "a logged table keeps its jobs")
}
