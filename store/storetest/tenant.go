package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// tenants returns s as a store.TenantStore, failing the test if it is not one.
func tenants(t testing.TB, s store.Store) store.TenantStore {
	t.Helper()
	ts, ok := s.(store.TenantStore)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.TenantStore", s)
	}
	return ts
}

// insertTenant inserts n available jobs of tenant in queue.
func insertTenant(t testing.TB, s store.Store, queue, tenant string, n int) {
	t.Helper()
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = tenantJob(queue, tenant, 0)
	}
	insert(t, s, ps...)
}

// countTenants counts jobs per tenant.
func countTenants(jobs []*store.Job) map[string]int {
	out := map[string]int{}
	for _, j := range jobs {
		out[j.Tenant]++
	}
	return out
}

func testTenantWeights(t *testing.T, s store.Store) {
	ts := tenants(t, s)
	q, a, b := uniq("weights"), uniq("A"), uniq("B")
	require.NoError(t, ts.SetTenantWeight(ctx(t), a, 3))
	insertTenant(t, s, q, a, 30)
	insertTenant(t, s, q, b, 30)

	// One at a time: every round is A three times and B once, whichever starts.
	var got []string
	for range 12 {
		jobs := claim(t, s, q, 1)
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].Tenant)
	}
	for i := 0; i+4 <= len(got); i++ {
		require.Equal(t, map[string]int{a: 3, b: 1}, countTenants(jobsOf(got[i:i+4])),
			"any 4 consecutive claims are 3 of A (weight 3) and 1 of B: %v", got)
	}
	// A batch claim takes the same shares.
	require.Equal(t, map[string]int{a: 6, b: 2}, countTenants(claim(t, s, q, 8)))

	// One claim at a time and claims of 3 and of 10 see the same turns: over two rounds of A (3),
	// C (1) and the jobs without a tenant (1), A takes 6, C 2 and the others 2.
	c := uniq("C")
	for _, size := range []int{1, 3, 10} {
		qs := uniq("weights-mix")
		insertTenant(t, s, qs, a, 10)
		insertTenant(t, s, qs, c, 10)
		insertTenant(t, s, qs, "", 10)
		counts := map[string]int{}
		for got := 0; got < 10; {
			jobs := claim(t, s, qs, min(size, 10-got))
			require.NotEmpty(t, jobs)
			for tn, n := range countTenants(jobs) {
				counts[tn] += n
			}
			got += len(jobs)
		}
		require.Equal(t, map[string]int{a: 6, c: 2, "": 2}, counts, "claims of %d", size)
	}

	// Forgotten, the weight is 1 again: A and B alternate.
	require.NoError(t, ts.DeleteTenantWeight(ctx(t), a))
	require.ErrorIs(t, ts.DeleteTenantWeight(ctx(t), a), store.ErrNotFound)
	require.Equal(t, map[string]int{a: 4, b: 4}, countTenants(claim(t, s, q, 8)))

	// Bad weights are refused.
	require.ErrorIs(t, ts.SetTenantWeight(ctx(t), a, 0), store.ErrInvalidParams)
	require.ErrorIs(t, ts.SetTenantWeight(ctx(t), a, store.MaxTenantWeight+1), store.ErrInvalidParams)
	require.ErrorIs(t, ts.SetTenantWeight(ctx(t), "", 2), store.ErrInvalidParams)
}

// jobsOf makes jobs of the given tenants, for countTenants.
func jobsOf(tenants []string) []*store.Job {
	out := make([]*store.Job, len(tenants))
	for i, tn := range tenants {
		out[i] = &store.Job{Tenant: tn}
	}
	return out
}

func testTenantStats(t *testing.T, s store.Store) {
	ts := tenants(t, s)
	q1, q2, a, b := uniq("tstats"), uniq("tstats"), uniq("A"), uniq("B")
	_, err := ts.GetTenant(ctx(t), a)
	require.ErrorIs(t, err, store.ErrNotFound, "a tenant with neither jobs nor weight is unknown")

	insertTenant(t, s, q1, a, 3)
	insertTenant(t, s, q2, a, 2)
	sched := tenantJob(q2, a, 0)
	sched.State, sched.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	insert(t, s, sched)
	insert(t, s, job(q1)) // no tenant: in no tenant's counts
	jobs := claim(t, s, q1, 10)
	require.Len(t, jobs, 4)
	for _, j := range jobs {
		if j.Tenant == a {
			require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: 1, State: store.StateCompleted, Token: j.ClaimToken}))
			break
		}
	}

	info, err := ts.GetTenant(ctx(t), a)
	require.NoError(t, err)
	require.Equal(t, a, info.Tenant)
	require.Equal(t, store.DefaultTenantWeight, info.Weight)
	require.False(t, info.Configured)
	require.Equal(t, map[store.State]int64{
		store.StateAvailable: 2, store.StateActive: 2, store.StateCompleted: 1, store.StateScheduled: 1,
	}, info.Counts, "counts span the tenant's queues")

	// A weight alone makes a tenant known.
	require.NoError(t, ts.SetTenantWeight(ctx(t), b, 4))
	info, err = ts.GetTenant(ctx(t), b)
	require.NoError(t, err)
	require.Equal(t, 4, info.Weight)
	require.True(t, info.Configured)
	require.Empty(t, info.Counts)

	list, err := ts.ListTenants(ctx(t))
	require.NoError(t, err)
	var names []string
	for _, i := range list {
		names = append(names, i.Tenant)
		if i.Tenant == a {
			require.Equal(t, int64(2), i.Counts[store.StateAvailable])
		}
	}
	require.Contains(t, names, a)
	require.Contains(t, names, b)
	require.IsIncreasing(t, names, "in tenant order")

	// Forgetting B's weight forgets B (it has no jobs).
	require.NoError(t, ts.DeleteTenantWeight(ctx(t), b))
	_, err = ts.GetTenant(ctx(t), b)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testRateLimitTenant(t *testing.T, s store.Store) {
	// A tenant's limit (stored under TenantLimitKey) bounds its active jobs across queues.
	q1, q2, a, b := uniq("tlimit"), uniq("tlimit"), uniq("A"), uniq("B")
	setLimit(t, s, store.TenantLimitKey(a), store.RateLimit{MaxActive: 2})
	insertTenant(t, s, q1, a, 5)
	insertTenant(t, s, q2, a, 2)
	insertTenant(t, s, q1, b, 3)
	got := claim(t, s, q1, 10)
	require.Equal(t, map[string]int{a: 2, b: 3}, countTenants(got), "A stops at its 2 active jobs; B is not held back")
	require.Empty(t, claim(t, s, q2, 10), "A's limit spans queues")

	var aJob *store.Job
	for _, j := range got {
		if j.Tenant == a {
			aJob = j
		}
	}
	announced := listen(t, s)
	require.True(t, finish(t, s, store.Completion{ID: aJob.ID, Attempt: 1, State: store.StateCompleted, Token: aJob.ClaimToken}))
	// Its queue is announced, as a rate-keyed job's: a claim waiting for A's room need not wait for
	// its poll.
	eventually(t, "the queue of the finished job of a limited tenant to be announced", func() bool {
		return len(announced.matching(func(n store.Notification) bool {
			return n.Kind == store.NotifyInsert && n.Queue == q1 && n.DueAt.IsZero()
		})) > 0
	})
	require.Equal(t, map[string]int{a: 1}, countTenants(claim(t, s, q2, 10)), "a finished job frees a slot")

	// A rate: at most 2 starts per window.
	q3, c := uniq("tlimit"), uniq("C")
	setLimit(t, s, store.TenantLimitKey(c), store.RateLimit{Rate: 2, Period: time.Hour})
	insertTenant(t, s, q3, c, 4)
	require.Len(t, claim(t, s, q3, 10), 2)
	require.Empty(t, claim(t, s, q3, 10))

	// Without its limit the tenant runs freely.
	require.NoError(t, limiter(t, s).DeleteRateLimit(ctx(t), store.TenantLimitKey(c)))
	require.Len(t, claim(t, s, q3, 10), 2)
}

// testRateLimitTenantWindowDue: NextDue reports the end of a tenant's full rate window while the
// tenant's jobs wait in the queue, as it does a rate key's: a producer the window stopped then
// claims again when the window ends, not at its poll (a window of 100 ms used to admit one window's
// jobs per poll).
func testRateLimitTenantWindowDue(t *testing.T, s store.Store) {
	const period = 2 * time.Second
	q, a := uniq("twindow"), uniq("A")
	setLimit(t, s, store.TenantLimitKey(a), store.RateLimit{Rate: 2, Period: period})
	insertTenant(t, s, q, a, 5)
	start := time.Now()
	got := claim(t, s, q, 10)
	opened := time.Now()
	require.Len(t, got, 2, "the window admits Rate claims")
	next, due, err := s.NextDue(ctx(t), q)
	require.NoError(t, err)
	if time.Since(start) < period-clockSlack { // still inside the window
		require.Empty(t, claim(t, s, q, 10), "a spent window admits no more claims")
		require.True(t, due, "NextDue reports the end of the tenant's window")
		requireBetween(t, start.Add(period), opened.Add(period), next, "NextDue is the window's end")
	}
}
