package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestClaimBesideAScheduledBacklog: a queue with 100,000 jobs due in an hour or more (scheduled, and
// retryable as after an outage of what they call) and three available jobs. jobs_claim_idx orders
// the backlog after the due jobs of its priority. A claim that finds fewer jobs than its limit must
// stop at the first job of each priority not yet due, not pass over the whole backlog (646 buffers)
// nor read each backlog job's row (which it did while its due-time test needed the row's state:
// 100,000 rows at every claim). The
// same goes for the hand-off's insert, which looks for a claimable job ahead of the new one, and for
// the fair claim of a queue with tenants (claim_fair_pick, since migration 030).
// Buffers, not time, so that the machine's load does not matter.
func TestClaimBesideAScheduledBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	const backlog = 100_000
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at)
SELECT (lpad(to_hex(1700000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'q', '[]', CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END, now(),
	now() + interval '1 hour' + i * interval '1 ms'
FROM generate_series(1, $1::int) AS i`)
	_, err := s.pool.Exec(ctx, fill, backlog)
	require.NoError(t, err)
	var available []*store.InsertParams
	for range 3 {
		p := params("q")
		available = append(available, p)
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	// The backlog's index entries take about 650 pages, its rows about 2,500 (read once each,
	// as they lie in the order of the index): a claim that read the rows read both, a claim that
	// passed over the entries read the first (646 buffers), and the claim that walks the queue's
	// priorities reads neither (about 50).
	const most = 200.0

	claimArgs := []any{"q", 10, int64(60e6), "w"}
	buffers, plan := explainWarm(t, s, s.q.claimPlan, s.q.claim, []any{"q", newClaimTag()}, claimArgs)
	t.Logf("claim: %v buffers", buffers)
	require.Contains(t, plan, "jobs_claim_idx")
	require.Less(t, buffers, most, plan)

	// The hand-off's insert, with a producer waiting for the queue (this connection's backend
	// standing in for its listener).
	_, err = s.pool.Exec(ctx, s.expand.Replace(`INSERT INTO {schema}.waiters
		(id, queue, channel, listener_pid, worker_id, kinds, lease_us, free, expires_at)
		VALUES ('0123456789abcdef', 'q', 'ch', pg_backend_pid(), 'w', NULL, 60000000, 10, now() + interval '1 hour')`))
	require.NoError(t, err)
	row, err := prepareRow(params("q"))
	require.NoError(t, err)
	buffers, plan = explainWarm(t, s, s.q.handoffPlan, s.q.insertHanded, nil, row.args(row.state, row.p.ScheduledAt))
	t.Logf("hand-off insert: %v buffers", buffers)
	require.Less(t, buffers, 100.0, "the probe for a claimable job ahead stops at the first due entry:\n%s", plan)

	// The fair claim (migration 029): a backlog of tenant a's, and tenants a and b with jobs due.
	tfill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, tenant)
SELECT (lpad(to_hex(1800000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'tq', '[]', 'retryable', now(), now() + interval '1 hour' + i * interval '1 ms', 'a'
FROM generate_series(1, $1::int) AS i`)
	_, err = s.pool.Exec(ctx, tfill, backlog)
	require.NoError(t, err)
	var due []string
	for _, tenant := range []string{"a", "b", "a", "b"} {
		p := params("tq")
		p.Tenant = tenant
		due = append(due, p.ID)
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)
	buffers, plan = explainWarm(t, s, s.q.claimFairPlan, s.q.claimFair, []any{"tq", newClaimTag()},
		[]any{"tq", 10, int64(60e6), "w", nil})
	t.Logf("fair claim: %v buffers", buffers)
	// The fair claim probes the queue several times (is it one tenant's, the next tenant with a job
	// due, each tenant's turn). Each probe passed over the backlog's index entries (about 2,000
	// buffers, where reading the rows too took about 10,000); since migration 030 each walks the
	// priorities of the queue or of a tenant and stops at the first job not yet due (about 160).
	require.Less(t, buffers, 400.0, plan)
	fair, err := s.Claim(ctx, claimParams("tq", 10))
	require.NoError(t, err)
	require.ElementsMatch(t, due, ids(fair))

	// And the plain claim still takes what is due, in claim order: the available jobs, then a
	// backlog job once due.
	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Equal(t, paramIDs(available), ids(jobs))
	_, err = s.pool.Exec(ctx, s.expand.Replace(`UPDATE {schema}.jobs SET scheduled_at = now() - interval '1 second'
		WHERE id = (SELECT id FROM {schema}.jobs WHERE state = 'retryable' ORDER BY scheduled_at LIMIT 1)`))
	require.NoError(t, err)
	jobs, err = s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, store.StateActive, jobs[0].State)
	require.Equal(t, 1, jobs[0].Attempt)
	var left int
	require.NoError(t, s.pool.QueryRow(ctx, s.expand.Replace(`SELECT count(*) FROM {schema}.jobs
		WHERE queue = 'q' AND state IN ('scheduled', 'retryable')`)).Scan(&left))
	require.Equal(t, backlog-1, left)
}

// TestLimitedClaimBesideAKeyBacklog: a rate-limited queue whose keys hold 100,000 retries due in an
// hour or more, beside a few due jobs: of a key with room, of no key, and of a key at its limit
// whose limit drops what it holds back. claim_limited_untokened looks for each kind of job (the jobs
// without a limit, each key's, a key's job left waiting for OnLimited, the jobs an exhausted key
// drops) by walking the priorities of the queue or of the key, stopping at the first job of each
// not yet due (migration 031); a scan in claim order passed over the backlog's entries at each.
// Buffers, not time.
func TestLimitedClaimBesideAKeyBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1000}))
	require.NoError(t, s.SetRateLimit(ctx, "d", store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop}))
	insert := func(key string) string {
		t.Helper()
		p := params("lq")
		p.RateKey = key
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		return p.ID
	}
	// Key d's one job is running: d is at its limit.
	running := insert("d")
	jobs, err := s.Claim(ctx, claimParams("lq", 1))
	require.NoError(t, err)
	require.Equal(t, []string{running}, ids(jobs))

	const backlog = 100_000
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, rate_key)
SELECT (lpad(to_hex(1900000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'lq', '[]', 'retryable', now(), now() + interval '1 hour' + i * interval '1 ms',
	CASE WHEN i % 2 = 0 THEN 'k' ELSE 'd' END
FROM generate_series(1, $1::int) AS i`)
	_, err = s.pool.Exec(ctx, fill, backlog)
	require.NoError(t, err)
	var claimable, dropped []string
	for _, key := range []string{"k", "", "d", "k", "", "d"} {
		id := insert(key)
		if key == "d" {
			dropped = append(dropped, id)
		} else {
			claimable = append(claimable, id)
		}
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	// As a claim with an OnLimited subscriber runs it (step 4 too).
	buffers, plan := explainWarm(t, s, s.q.claimLimitedPlan, s.q.claimLimited, []any{"on", newClaimTag()},
		[]any{"lq", nil, 10, int64(60e6), "w"})
	t.Logf("limited claim: %v buffers", buffers)
	// Each of the claim's looks for due jobs passed over the backlog's index entries (2,184 buffers
	// in all before migration 031, in 51 ms); walking priorities it reads about 240 (in 1.9 ms).
	require.Less(t, buffers, 700.0, plan)

	var hits []store.LimitHit
	p := claimParams("lq", 10)
	p.OnLimited = func(h []store.LimitHit) { hits = append(hits, h...) }
	jobs, err = s.Claim(ctx, p)
	require.NoError(t, err)
	require.Equal(t, claimable, ids(jobs), "the due jobs of k and of no key, in claim order")
	require.Len(t, hits, 1)
	require.Equal(t, "d", hits[0].Key)
	for _, id := range dropped {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.StateDiscarded, j.State, "d had no room and drops what it holds back")
	}
	var left int
	require.NoError(t, s.pool.QueryRow(ctx, s.expand.Replace(`SELECT count(*) FROM {schema}.jobs
		WHERE queue = 'lq' AND state = 'retryable'`)).Scan(&left))
	require.Equal(t, backlog, left, "the backlog is left as it was")
}

// explainWarm runs sql after its plan statement in a transaction it rolls back, and returns the
// buffers the statement read and its plan. It runs sql once before, undone, so that what it
// measures is a call of a warm connection: the first call of a plpgsql function on a connection
// plans its statements (about 700 buffers of the catalog's for claim_fair_pick).
func explainWarm(t *testing.T, s *Store, plan, sql string, planArgs, args []any) (float64, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if plan != "" {
		_, err = tx.Exec(ctx, plan, planArgs...)
		require.NoError(t, err)
	}
	_, err = tx.Exec(ctx, "SAVEPOINT warm")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sql, args...)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT warm")
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out))
	var root []struct {
		Plan          map[string]any `json:"Plan"`
		ExecutionTime float64        `json:"Execution Time"`
	}
	require.NoError(t, json.Unmarshal(out, &root))
	top := root[0].Plan
	t.Logf("%.2f ms", root[0].ExecutionTime)
	return top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64), string(out)
}

// TestClaimWalksPriorities: the claim walks a queue's priorities, highest first, and takes each
// one's due jobs in due-time order, past priorities whose jobs are all due later, and no more than
// its limit.
func TestClaimWalksPriorities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	// 20,000 retries due in an hour and more at each of priorities 10 and 5.
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, priority)
SELECT (lpad(to_hex(1700000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'pq', '[]', 'retryable', now(), now() + interval '1 hour' + i * interval '1 ms',
	CASE WHEN i % 2 = 0 THEN 10 ELSE 5 END
FROM generate_series(1, $1::int) AS i`)
	_, err := s.pool.Exec(ctx, fill, 40_000)
	require.NoError(t, err)
	// Due now, in the order a claim must take them: priority 10's, then 0's two (oldest first),
	// then -3's.
	var want []string
	for _, prio := range []int{10, 0, 0, -3} {
		p := params("pq")
		p.Priority = prio
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		want = append(want, p.ID)
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, s.q.claimPlan, "pq", newClaimTag())
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.q.claim,
		"pq", 10, int64(60e6), "w").Scan(&out))
	require.NoError(t, tx.Rollback(ctx))
	var root []struct {
		Plan map[string]any `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &root))
	buffers := root[0].Plan["Shared Hit Blocks"].(float64) + root[0].Plan["Shared Read Blocks"].(float64)
	t.Logf("claim: %v buffers", buffers)
	require.Less(t, buffers, 200.0, "the backlogs' entries (about 260 pages) are passed over:\n%s", out)

	first, err := s.Claim(ctx, claimParams("pq", 2))
	require.NoError(t, err)
	require.Equal(t, want[:2], ids(first), "no more than the limit, in claim order")
	rest, err := s.Claim(ctx, claimParams("pq", 10))
	require.NoError(t, err)
	require.Equal(t, want[2:], ids(rest))
	none, err := s.Claim(ctx, claimParams("pq", 10))
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestPromoteBesideAScheduledBacklog: three queues with 300,000 jobs due in an hour or more, and two
// of them with jobs due now. The promoter runs every second on the leader; it must find what is due
// in each queue from the front of the queue's range of jobs_due_idx, not by passing over the entries
// of every job due later (which it did, 1,150 buffers a pass here, when it ordered all queues'
// entries by due time at once). Buffers, not time.
func TestPromoteBesideAScheduledBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	const backlog = 300_000
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at)
SELECT (lpad(to_hex(1700000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'q' || (i % 3), '[]', CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END, now(),
	now() + interval '1 hour' + i * interval '1 ms'
FROM generate_series(1, $1::int) AS i`)
	_, err := s.pool.Exec(ctx, fill, backlog)
	require.NoError(t, err)
	// Due now: two jobs in q0 and one in q2, inserted due in the future and then made due, oldest
	// first in q2.
	var due []string
	for i, queue := range []string{"q2", "q0", "q0"} {
		p := params(queue)
		p.State = store.StateScheduled
		p.ScheduledAt = time.Now().Add(time.Hour)
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		_, err = s.pool.Exec(ctx, s.expand.Replace(`UPDATE {schema}.jobs
			SET scheduled_at = now() - interval '1 minute' + $2 * interval '1 second' WHERE id = $1`), p.ID, i)
		require.NoError(t, err)
		due = append(due, p.ID)
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sqlRescuePlan)
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.q.promote, 1000).Scan(&out))
	require.NoError(t, tx.Rollback(ctx))
	var root []struct {
		Plan          map[string]any `json:"Plan"`
		ExecutionTime float64        `json:"Execution Time"`
	}
	require.NoError(t, json.Unmarshal(out, &root))
	buffers := root[0].Plan["Shared Hit Blocks"].(float64) + root[0].Plan["Shared Read Blocks"].(float64)
	t.Logf("promote: %.2f ms, %v buffers", root[0].ExecutionTime, buffers)
	// Two probes per queue and the promoted jobs' pages: about 30 buffers; the backlog's entries
	// alone take over 1,000 pages.
	require.Less(t, buffers, 200.0, string(out))

	// Promote takes the earliest due first across the queues, and only what is due.
	n, err := s.Promote(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	states := func() []store.State {
		var out []store.State
		for _, id := range due {
			j, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			out = append(out, j.State)
		}
		return out
	}
	require.Equal(t, []store.State{store.StateAvailable, store.StateAvailable, store.StateScheduled}, states())
	n, err = s.Promote(ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []store.State{store.StateAvailable, store.StateAvailable, store.StateAvailable}, states())
	n, err = s.Promote(ctx, 1000)
	require.NoError(t, err)
	require.Zero(t, n)
	var waiting int
	require.NoError(t, s.pool.QueryRow(ctx, s.expand.Replace(`SELECT count(*) FROM {schema}.jobs
		WHERE state IN ('scheduled', 'retryable')`)).Scan(&waiting))
	require.Equal(t, backlog, waiting)
}

// TestLimitedClaimBesideADueKeyBacklog: a rate-limited queue holding 40,000 due jobs of one key with
// room, beside a few jobs without a limit among them. claim_limited_untokened takes the key's jobs
// first and, when they fill the claim, looks for jobs without a limit only up to the last of them in
// claim order (migration 032); before, that look walked jobs_claim_idx over every due job of the key
// at each claim, reading each one's row to see its key. Buffers, not time; and the claim takes the
// same jobs in the same order.
func TestLimitedClaimBesideADueKeyBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1000}))
	const backlog = 40_000
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, rate_key)
SELECT (lpad(to_hex(2000000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'lq', '[]', 'available', now(), $2::timestamptz + i * interval '1 ms', 'k'
FROM generate_series(1, $1::int) AS i`)
	base := time.Now().Add(-time.Hour) // the backlog's first due time
	_, err := s.pool.Exec(ctx, fill, backlog, base)
	require.NoError(t, err)
	// Jobs without a limit: one of a higher priority, one due before the backlog, one among its
	// first jobs, one after it all.
	free := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, priority)
VALUES ('00000000-0000-7000-8000-000000000001', 'k', 'lq', '[]', 'available', now(), $1::timestamptz - interval '1 hour', 5),
	('00000000-0000-7000-8000-000000000002', 'k', 'lq', '[]', 'available', now(), $1::timestamptz - interval '1 hour', 0),
	('00000000-0000-7000-8000-000000000003', 'k', 'lq', '[]', 'available', now(), $1::timestamptz + interval '5.5 ms', 0),
	('00000000-0000-7000-8000-000000000004', 'k', 'lq', '[]', 'available', now(), now() - interval '1 second', 0)`)
	_, err = s.pool.Exec(ctx, free, base)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	// The claim's order: priority first, then due time.
	var want []string
	rows, err := s.pool.Query(ctx, s.expand.Replace(`SELECT id::text FROM {schema}.jobs WHERE queue = 'lq'
		ORDER BY priority DESC, scheduled_at, id LIMIT 10`))
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "00000000-0000-7000-8000-000000000001", want[0])
	require.Equal(t, "00000000-0000-7000-8000-000000000002", want[1])
	require.Equal(t, "00000000-0000-7000-8000-000000000003", want[7])

	buffers, plan := explainWarm(t, s, s.q.claimLimitedPlan, s.q.claimLimited, []any{"", newClaimTag()},
		[]any{"lq", nil, 10, int64(60e6), "w"})
	t.Logf("limited claim: %v buffers", buffers)
	// The look for jobs without a limit passed over the key's 40,000 due jobs (1,365 buffers, 15 ms);
	// bounded by the key's tenth job it reads a few of them (about 300 buffers in all, 1.2 ms).
	require.Less(t, buffers, 700.0, plan)

	jobs, err := s.Claim(ctx, claimParams("lq", 10))
	require.NoError(t, err)
	require.Equal(t, want, ids(jobs), "the first 10 jobs in claim order, with and without the key")
	j, err := s.GetJob(ctx, "00000000-0000-7000-8000-000000000004")
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "the job without a limit after the key's tenth waits")
}
