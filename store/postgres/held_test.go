package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// heldCount returns how many jobs of queue q are held out of the claim index.
func heldCount(t *testing.T, s *Store, q string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		s.expand.Replace(`SELECT count(*) FROM {schema}.jobs WHERE queue = $1 AND held`), q).Scan(&n))
	return n
}

// TestLimitedClaimBesideAHeldKeyBacklog (migration 034): a key at its limit with 40,000 due jobs.
// The claims that find the key without room hold its due jobs (10,000 a claim) out of
// jobs_claim_idx, so the later claims' look for jobs without a limit no longer passes over them
// (1,931 buffers a claim before). Held jobs look unchanged, run when their key has room, ahead of
// later jobs without a limit, and return to the claim index when the key's limit is deleted.
func TestLimitedClaimBesideAHeldKeyBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1}))
	const backlog = 40_000
	// The key's one running job, then its backlog, due an hour ago onwards.
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at,
	rate_key, attempt, started_at, lease_expires_at, worker_id)
SELECT (lpad(to_hex(3000000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'hq', '[]', CASE WHEN i = 0 THEN 'active' ELSE 'available' END, now(),
	now() - interval '1 hour' + i * interval '1 ms', 'k',
	CASE WHEN i = 0 THEN 1 ELSE 0 END, CASE WHEN i = 0 THEN now() END,
	CASE WHEN i = 0 THEN now() + interval '1 hour' END, CASE WHEN i = 0 THEN 'w' END
FROM generate_series(0, $1::int) AS i`)
	_, err := s.pool.Exec(ctx, fill, backlog)
	require.NoError(t, err)
	var running string
	require.NoError(t, s.pool.QueryRow(ctx, s.expand.Replace(`SELECT id::text FROM {schema}.jobs
	WHERE queue = 'hq' AND state = 'active'`)).Scan(&running))
	// The key's first four waiting jobs, in claim order.
	rows, err := s.pool.Query(ctx, s.expand.Replace(`SELECT id::text FROM {schema}.jobs
	WHERE queue = 'hq' AND state = 'available' ORDER BY priority DESC, scheduled_at, id LIMIT 4`))
	require.NoError(t, err)
	first, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, first, 4)
	// A job without a limit due after the whole backlog.
	free := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at)
VALUES ($1, 'k', 'hq', '[]', 'available', now(), now() - interval '1 second')`)
	_, err = s.pool.Exec(ctx, free, "00000000-0000-7000-8000-000000000001")
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	jobs, err := s.Claim(ctx, claimParams("hq", 10))
	require.NoError(t, err)
	require.Equal(t, []string{"00000000-0000-7000-8000-000000000001"}, ids(jobs), "the job without a limit, past the key's backlog")
	require.Equal(t, 10_000, heldCount(t, s, "hq"), "the claim held the key's first 10,000 due jobs")
	for i := 0; i < 3; i++ {
		jobs, err = s.Claim(ctx, claimParams("hq", 10))
		require.NoError(t, err)
		require.Empty(t, jobs, "the key has no room")
	}
	require.Equal(t, backlog, heldCount(t, s, "hq"), "the whole backlog is held after four claims")

	j, err := s.GetJob(ctx, first[0])
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "a held job looks as it was")
	counts, err := s.CountAvailableByPriority(ctx, "hq")
	require.NoError(t, err)
	require.Equal(t, map[int]int64{0: backlog}, counts, "held jobs are counted")

	// Before migration 034: 1,931 buffers. What is left are the index entries of the rows the hold
	// replaced, until a vacuum removes them (about 500 buffers; 20 after a vacuum). While a
	// snapshot taken before the hold is open (another test's, another program's: the horizon is
	// the database's), those entries still point at live row versions and the claim reads them
	// all (about 2,100 buffers); a scan after that snapshot ends marks them dead. So the claim is
	// measured again until that happens.
	measure := func() (float64, string) {
		return explainWarm(t, s, s.q.claimLimitedPlan, s.q.claimLimited, []any{"", newClaimTag()},
			[]any{"hq", nil, 10, int64(60e6), "w"})
	}
	buffers, plan := measure()
	for deadline := time.Now().Add(2 * time.Minute); buffers >= 1000 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		buffers, plan = measure()
	}
	t.Logf("limited claim beside a held backlog: %v buffers", buffers)
	require.Less(t, buffers, 1000.0, "the claim passes over no held job (or a snapshot stayed open for 2 minutes): %s", plan)

	// A later job without a limit, then room for the key: the claim takes the key's first job, held,
	// ahead of the later job (claim order), and writes it unheld.
	_, err = s.pool.Exec(ctx, s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at)
VALUES ($1, 'k', 'hq', '[]', 'available', now(), now())`), "00000000-0000-7000-8000-000000000003")
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, s.expand.Replace(`UPDATE {schema}.jobs SET state = 'completed', completed_at = now(),
	lease_expires_at = NULL WHERE id = $1`), running)
	require.NoError(t, err)
	jobs, err = s.Claim(ctx, claimParams("hq", 1))
	require.NoError(t, err)
	require.Equal(t, first[:1], ids(jobs), "the key's first held job")
	var held *bool
	require.NoError(t, s.pool.QueryRow(ctx, s.expand.Replace(`SELECT held FROM {schema}.jobs WHERE id = $1`), jobs[0].ID).Scan(&held))
	require.Nil(t, held, "a claimed job is not held")
	require.Equal(t, backlog-1, heldCount(t, s, "hq"))

	// The limit deleted: the next claim returns the key's jobs to the claim index first, and takes
	// them as jobs without a limit, in claim order.
	require.NoError(t, s.DeleteRateLimit(ctx, "k"))
	jobs, err = s.Claim(ctx, claimParams("hq", 3))
	require.NoError(t, err)
	require.Equal(t, first[1:], ids(jobs))
	require.Zero(t, heldCount(t, s, "hq"), "a key without a limit holds nothing")
}

// TestHeldAtInsert: a job inserted with a rate key that a limit bounds is held from the start, on
// every way of writing a batch (single INSERTs with and without the hand-off, one INSERT of arrays,
// COPY above arraysMax, COPY beside the batch's own limits), so no claim has to hold it; jobs of a
// key without a limit, and jobs without a key, are not. Held jobs still run up to their key's room,
// in claim order, and all run once the limit is deleted.
func TestHeldAtInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, path := range []struct {
		name      string
		n         int
		noHandoff bool
		ownLimit  bool // the bounded key's jobs carry their limit (the batch writes it)
	}{{"pipeline", arraysMin - 1, true, false}, {"handoff-small", pipelineMax, false, false},
		{"arrays", 20, false, false}, {"copy", arraysMax + 1, false, false}, {"copy-with-limits", 12, false, true},
		{"pipeline-with-limits", 3, false, true}} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			s := setupHandoff(t, !path.noHandoff)
			if !path.ownLimit {
				require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1}))
			}
			// Job i: key k (bounded) when i%3 == 0, key f (no limit) when i%3 == 1, else no key.
			batch := make([]*store.InsertParams, path.n)
			want := map[string]bool{}
			var bounded []string
			for i := range batch {
				batch[i] = params("hq")
				switch i % 3 {
				case 0:
					batch[i].RateKey = "k"
					if path.ownLimit {
						batch[i].RateLimit = &store.RateLimit{MaxActive: 1}
					}
					bounded = append(bounded, batch[i].ID)
				case 1:
					batch[i].RateKey = "f"
				}
				want[batch[i].ID] = i%3 == 0
			}
			_, err := s.Insert(ctx, batch)
			require.NoError(t, err)
			rows, err := s.pool.Query(ctx, s.expand.Replace(`SELECT id::text, held IS TRUE FROM {schema}.jobs WHERE queue = 'hq'`))
			require.NoError(t, err)
			got := map[string]bool{}
			var id string
			var held bool
			_, err = pgx.ForEachRow(rows, []any{&id, &held}, func() error { got[id] = held; return nil })
			require.NoError(t, err)
			require.Equal(t, want, got, "held exactly the jobs of the bounded key")
			if path.n > 100 {
				return // the claims below read every job
			}

			// The key's first job runs beside every job without a limit; the claim unholds it.
			jobs, err := s.Claim(ctx, claimParams("hq", 100))
			require.NoError(t, err)
			require.Len(t, jobs, path.n-len(bounded)+1)
			require.Contains(t, ids(jobs), bounded[0], "the key's first job, in claim order")
			require.Equal(t, len(bounded)-1, heldCount(t, s, "hq"))
			// The limit deleted, its jobs all run.
			require.NoError(t, s.DeleteRateLimit(ctx, "k"))
			jobs, err = s.Claim(ctx, claimParams("hq", 100))
			require.NoError(t, err)
			require.ElementsMatch(t, bounded[1:], ids(jobs))
			require.Zero(t, heldCount(t, s, "hq"))
		})
	}
}
