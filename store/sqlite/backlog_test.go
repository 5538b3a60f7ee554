package sqlite

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// fillLater inserts n jobs due an hour or more from now straight into the table, job i due i ms
// after the first. cols gives SQL expressions in i for queue, state and any other column (tenant,
// rate_key, priority); state defaults to retryable.
func fillLater(tb testing.TB, s *Store, n int, cols map[string]string) {
	tb.Helper()
	names := []string{"state"}
	if _, ok := cols["state"]; !ok {
		cols["state"] = "'retryable'"
	}
	for c := range cols {
		if c != "state" {
			names = append(names, c)
		}
	}
	slices.Sort(names[1:])
	exprs := make([]string, len(names))
	for i, c := range names {
		exprs[i] = cols[c]
	}
	fill := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
INSERT INTO pronto_jobs (id, kind, created_at, scheduled_at, ` + strings.Join(names, ", ") + `)
SELECT printf('%08x-0000-7000-8000-%012x', i, i), 'k', ?1, ?1 + i * 1000, ` + strings.Join(exprs, ", ") + `
FROM n`
	_, err := s.w.ExecContext(context.Background(), fill, time.Now().Add(time.Hour).UnixMicro(), n)
	require.NoError(tb, err)
}

// fillBacklog inserts n jobs due an hour or more from now (scheduled and retryable) spread over
// queues q0, q1 and q2, straight into the table.
func fillBacklog(t testing.TB, s *Store, n int) {
	t.Helper()
	fillLater(t, s, n, map[string]string{"queue": "'q' || (i % 3)",
		"state": "CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END"})
}

// TestPromoteBesideAScheduledBacklog: three queues with 100,000 jobs due in an hour or more, two of
// them with jobs due now. The promoter, every second in the writer's transaction, must find what is
// due from the front of each queue's range of pronto_jobs_due (a search on the queue and the due
// time), not by passing over the entries of every job due later, as it did when it searched every
// queue at once; and it still promotes the earliest due first, and only what is due.
func TestPromoteBesideAScheduledBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	const backlog = 100_000
	fillBacklog(t, s, backlog)
	var due []string
	for i, queue := range []string{"q2", "q0", "q0"} {
		p := params(queue, 1)[0]
		p.State = store.StateScheduled
		p.ScheduledAt = time.Now().Add(time.Hour)
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		_, err = s.w.ExecContext(ctx, `UPDATE pronto_jobs SET scheduled_at = ?2 WHERE id = ?1`,
			p.ID, time.Now().Add(-time.Minute+time.Duration(i)*time.Second).UnixMicro())
		require.NoError(t, err)
		due = append(due, p.ID)
	}

	plan := planOf(t, s, promoteSQL, time.Now().UnixMicro(), 1000)
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
	// What is due is found by a search on the queue and the due time; the index is never read in
	// full to be sorted by due time (the old plan: SCAN ... pronto_jobs_due, then a temporary
	// B-tree for the ORDER BY). The walk of the queues reads the index in order up to its LIMIT 1.
	var searches int
	for i, step := range plan {
		if strings.Contains(step, "pronto_jobs_due (queue=? AND scheduled_at<?)") {
			searches++
		}
		if strings.HasPrefix(step, "SCAN pronto_jobs USING INDEX pronto_jobs_due") && i+1 < len(plan) {
			require.NotEqual(t, "USE TEMP B-TREE FOR ORDER BY", plan[i+1])
		}
	}
	require.Equal(t, 1, searches, "what is due is found by queue and due time")

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
	require.NoError(t, s.w.QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs
		WHERE state IN ('scheduled', 'retryable')`).Scan(&waiting))
	require.Equal(t, backlog, waiting)
}

// BenchmarkPromoteBesideAScheduledBacklog measures a promote pass that finds nothing due beside
// 100,000 jobs due in an hour or more in three queues: what the leader's promoter pays every second
// while such a backlog waits.
func BenchmarkPromoteBesideAScheduledBacklog(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	fillBacklog(b, s, 100_000)
	b.ResetTimer()
	for range b.N {
		n, err := s.Promote(ctx, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if n != 0 {
			b.Fatalf("promoted %d jobs of a backlog due in an hour", n)
		}
	}
}

// TestClaimWalksPriorities: the claim walks a queue's priorities, highest first, and takes each
// one's due jobs in due-time order, past priorities whose jobs are all due later (a search by queue,
// priority and due time, never a pass over the jobs due later), and no more than its limit.
func TestClaimWalksPriorities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	// 20,000 retries due in an hour and more at each of priorities 10 and 5.
	fillLater(t, s, 40_000, map[string]string{"queue": "'pq'", "priority": "CASE WHEN i % 2 = 0 THEN 10 ELSE 5 END"})
	// Due now, in the order a claim must take them: priority 10's, then 0's two (oldest first),
	// then -3's.
	var want []string
	for _, prio := range []int{10, 0, 0, -3} {
		p := params("pq", 1)[0]
		p.Priority = prio
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		want = append(want, p.ID)
	}

	plan := planOf(t, s, claimQuery(0), time.Now().UnixMicro(), 1, "w", "pq", 10)
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
	require.Contains(t, plan, "SEARCH pronto_jobs USING INDEX pronto_jobs_claim (queue=? AND priority=? AND scheduled_at<?)")
	for _, step := range plan {
		require.NotContains(t, step, "TEMP B-TREE", "no sort: the walk yields the jobs in claim order")
		require.NotRegexp(t, `^SCAN pronto_jobs\b`, step, "no scan of the table")
	}

	claim := func(limit int) []string {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "pq", Limit: limit, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		return ids
	}
	require.Equal(t, want[:2], claim(2), "no more than the limit, in claim order")
	require.Equal(t, want[2:], claim(10))
	require.Empty(t, claim(10))
}

// planOf returns the steps of sql's query plan with args.
func planOf(t *testing.T, s *Store, sql string, args ...any) []string {
	t.Helper()
	rows, err := s.w.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notUsed, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return plan
}

// TestFairClaimBesideATenantBacklog: tenant a has 20,000 retries due in an hour and more, and a and b
// have jobs due now. The fair claim's statements walk priorities as the plain claim does (a turn's
// jobs of a tenant, the jobs without a tenant among the first 64), and the walk over tenants asks
// each tenant whether it has a job due before taking it as the next one, so none of them passes
// over a tenant's jobs due later (34 ms a claim before, in the writer's transaction). The claim
// still takes exactly the due jobs, in turns.
func TestFairClaimBesideATenantBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	fillLater(t, s, 20_000, map[string]string{"queue": "'tq'", "tenant": "'a'"})

	q := newFairSQL(0)
	now := time.Now().UnixMicro()
	best := planOf(t, s, q.best, now, "tq", "a", 10)
	t.Logf("best:\n%s", strings.Join(best, "\n"))
	require.Contains(t, best, "SEARCH pronto_jobs USING INDEX pronto_jobs_tenant (queue=? AND tenant=? AND priority=? AND scheduled_at<?)")
	untenanted := planOf(t, s, q.untenanted, now, "tq", "", 10)
	t.Logf("untenanted:\n%s", strings.Join(untenanted, "\n"))
	require.Contains(t, untenanted, "SEARCH pronto_jobs USING INDEX pronto_jobs_claim (queue=? AND priority=? AND scheduled_at<?)")
	for _, step := range append(best, untenanted...) {
		require.NotRegexp(t, `^SCAN pronto_jobs\b`, step)
	}
	next := planOf(t, s, q.next, now, "tq", "")
	require.Contains(t, next, "SEARCH pronto_jobs USING INDEX pronto_jobs_tenant (queue=? AND tenant>?)")

	// Due now: one of b, then one of a, then another of b.
	var due []string
	for _, tenant := range []string{"b", "a", "b"} {
		p := params("tq", 1)[0]
		p.Tenant = tenant
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		due = append(due, p.ID)
	}
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "tq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	got := make([]string, len(jobs))
	for i, j := range jobs {
		got[i] = j.ID
	}
	require.ElementsMatch(t, due, got, "exactly the due jobs")
	require.Equal(t, []string{"a", "b", "b"}, []string{jobs[0].Tenant, jobs[1].Tenant, jobs[2].Tenant}, "in turns: a, b, then b alone")
	jobs, err = s.Claim(ctx, store.ClaimParams{Queue: "tq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, jobs)
	var waiting int
	require.NoError(t, s.w.QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs WHERE state = 'retryable'`).Scan(&waiting))
	require.Equal(t, 20_000, waiting)
}

// TestLimitedClaimBesideAKeyBacklog: a rate key's 20,000 retries due in an hour and more, and jobs
// due now with the key, with another and without one. The limited claim pages its candidates by
// walking priorities (a search by queue, priority and due time; never a sort nor a scan of the
// table), so a page short of its size stops at the first job of each priority not yet due (12 ms a
// claim before, passing over the backlog); the claim still takes exactly the due jobs.
func TestLimitedClaimBesideAKeyBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	fillLater(t, s, 20_000, map[string]string{"queue": "'rq'", "rate_key": "'key1'",
		"priority": "CASE WHEN i % 2 = 0 THEN 0 ELSE 5 END"})

	plan := planOf(t, s, claimCandidatesSQL(0), time.Now().UnixMicro(), 20, "[]", "rq", nil, nil, nil, "[]")
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
	require.Contains(t, plan, "SEARCH pronto_jobs USING INDEX pronto_jobs_claim (queue=? AND priority=? AND scheduled_at<?)")
	for _, step := range plan {
		require.NotContains(t, step, "TEMP B-TREE")
		require.NotRegexp(t, `^SCAN pronto_jobs\b`, step)
	}

	var due []string
	for _, c := range []struct {
		key  string
		prio int
	}{{"key1", 0}, {"", 5}, {"key2", -1}, {"key1", 5}} {
		p := params("rq", 1)[0]
		p.RateKey, p.Priority = c.key, c.prio
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		due = append(due, p.ID)
	}
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	got := make([]string, len(jobs))
	for i, j := range jobs {
		got[i] = j.ID
	}
	require.Equal(t, []string{due[1], due[3], due[0], due[2]}, got, "the due jobs, in claim order")
	jobs, err = s.Claim(ctx, store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, jobs)
}
