package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/pgcluster"
	"github.com/pronto-jobs/pronto/store"
)

// TestCrashRolledBackClaimCannotDecide crashes a private PostgreSQL right after a claim. Claims commit
// without waiting for their WAL flush, so the crash can undo one: the job is available again under
// the same attempt number and is claimed anew. The first run, which believes it holds the job, must
// not decide it: its heartbeat is refused, and so is its outcome, though its attempt number matches.
func TestCrashRolledBackClaimCannotDecide(t *testing.T) {
	ctx := context.Background()
	cl := pgcluster.Start(t)
	conn, err := pgx.Connect(ctx, cl.URL())
	require.NoError(t, err)
	// The WAL writer flushes asynchronously committed transactions every wal_writer_delay: slow it
	// down, so that a crash right after a claim undoes the claim.
	_, err = conn.Exec(ctx, `ALTER SYSTEM SET wal_writer_delay = '10s'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	open := func() *Store {
		cfg, err := pgxpool.ParseConfig(cl.URL())
		require.NoError(t, err)
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := New(pool, Config{Schema: "crash"})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		return s
	}
	for try := 1; try <= 5; try++ {
		s := open()
		p := params("crash")
		_, err := s.Insert(ctx, []*store.InsertParams{p}) // a durable commit
		require.NoError(t, err)
		first, err := s.Claim(ctx, store.ClaimParams{Queue: "crash", Limit: 1, WorkerID: "w1", LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Len(t, first, 1)
		cl.Restart("immediate")

		s = open()
		j, err := s.GetJob(ctx, p.ID)
		require.NoError(t, err)
		if j.State == store.StateActive {
			t.Logf("try %d: the claim reached the disk before the crash; again", try)
			continue
		}
		require.Equal(t, store.StateAvailable, j.State, "the crash undid the claim")
		require.Equal(t, 0, j.Attempt)

		second, err := s.Claim(ctx, store.ClaimParams{Queue: "crash", Limit: 1, WorkerID: "w1", LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Len(t, second, 1)
		require.Equal(t, first[0].Attempt, second[0].Attempt, "the same attempt number twice")
		require.NotEqual(t, first[0].ClaimToken, second[0].ClaimToken)

		lost, err := s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w1", IDs: []string{p.ID},
			Tokens: []string{first[0].ClaimToken}, LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []string{p.ID}, lost, "the undone claim's heartbeat is refused")
		res, err := s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: first[0].Attempt,
			Token: first[0].ClaimToken, State: store.StateCompleted}})
		require.NoError(t, err)
		require.False(t, res[0].Applied, "the undone claim's outcome is refused")
		res, err = s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: second[0].Attempt,
			Token: second[0].ClaimToken, State: store.StateCompleted}})
		require.NoError(t, err)
		require.True(t, res[0].Applied, "the current claim decides")
		return
	}
	t.Fatal("no crash undid a claim in 5 tries")
}
