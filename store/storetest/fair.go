package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// tenantJob returns the parameters of an available job of tenant ("" for none) in queue.
func tenantJob(queue, tenant string, priority int) *store.InsertParams {
	p := job(queue)
	p.Tenant, p.Priority = tenant, priority
	return p
}

// claimTenants claims n jobs of queue one at a time and returns their tenants ("-" for none).
func claimTenants(t *testing.T, s store.Store, queue string, n int) []string {
	t.Helper()
	var got []string
	for range n {
		jobs := claim(t, s, queue, 1)
		require.Len(t, jobs, 1)
		tenant := jobs[0].Tenant
		if tenant == "" {
			tenant = "-"
		}
		got = append(got, tenant)
	}
	return got
}

func testFairTenants(t *testing.T, s store.Store) {
	// A floods the queue first; B's few jobs are still claimed in turn with A's, not after them.
	q := uniq("fair")
	var params []*store.InsertParams
	for range 100 {
		params = append(params, tenantJob(q, "A", 0))
	}
	insert(t, s, params...)
	params = params[:0]
	for range 5 {
		params = append(params, tenantJob(q, "B", 0))
	}
	insert(t, s, params...)
	got := claimTenants(t, s, q, 10)
	require.ElementsMatch(t, []string{"A", "A", "A", "A", "A", "B", "B", "B", "B", "B"}, got,
		"B's 5 jobs come within the first 10 claims: %v", got)
	for i := 1; i < len(got); i++ {
		require.NotEqual(t, got[i-1], got[i], "claims alternate between the tenants with waiting jobs: %v", got)
	}
	require.Equal(t, []string{"A", "A", "A"}, claimTenants(t, s, q, 3), "B drained, A alone")

	// A batch claim rotates too.
	q = uniq("fair-batch")
	params = params[:0]
	for range 6 {
		params = append(params, tenantJob(q, "A", 0))
	}
	params = append(params, tenantJob(q, "B", 0), tenantJob(q, "C", 0))
	insert(t, s, params...)
	jobs := claim(t, s, q, 6)
	counts := map[string]int{}
	for _, j := range jobs {
		counts[j.Tenant]++
	}
	require.Equal(t, map[string]int{"A": 4, "B": 1, "C": 1}, counts)
	counts = map[string]int{}
	for _, j := range jobs[:3] {
		counts[j.Tenant]++
	}
	require.Equal(t, map[string]int{"A": 1, "B": 1, "C": 1}, counts, "the first three of a batch are one of each tenant")
}

func testFairPriorityWithinTenant(t *testing.T, s store.Store) {
	q := uniq("fair-prio")
	aLow, aHigh := tenantJob(q, "A", 0), tenantJob(q, "A", 5)
	bLow, bHigh := tenantJob(q, "B", -1), tenantJob(q, "B", 3)
	insert(t, s, aLow, bLow, aHigh, bHigh)
	var got []string
	for range 4 {
		jobs := claim(t, s, q, 1)
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].ID)
	}
	// Each tenant's jobs come highest priority first; the tenants alternate.
	require.Contains(t, [][]string{{aHigh.ID, bHigh.ID, aLow.ID, bLow.ID}, {bHigh.ID, aHigh.ID, bLow.ID, aLow.ID}}, got)
	require.Empty(t, claim(t, s, q, 1))

	// A kinds filter applies within the turns: a tenant without jobs of those kinds is passed over.
	q = uniq("fair-kinds")
	ax, by, bx := tenantJob(q, "A", 0), tenantJob(q, "B", 0), tenantJob(q, "B", 0)
	ax.Kind, by.Kind, bx.Kind = "x", "y", "x"
	insert(t, s, ax, by, bx)
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: q, Kinds: []string{"y"}, Limit: 5, WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err)
	require.Equal(t, []string{by.ID}, ids(jobs))
	require.ElementsMatch(t, []string{ax.ID, bx.ID}, ids(claim(t, s, q, 5)))
}

func testFairTenantless(t *testing.T, s store.Store) {
	// Jobs without a tenant share one turn of the rotation among themselves.
	q := uniq("fair-mixed")
	var params []*store.InsertParams
	for range 10 {
		params = append(params, tenantJob(q, "", 0))
	}
	for range 2 {
		params = append(params, tenantJob(q, "A", 0))
	}
	insert(t, s, params...)
	got := claimTenants(t, s, q, 4)
	require.ElementsMatch(t, []string{"-", "-", "A", "A"}, got, "tenantless jobs take one turn: %v", got)
	require.Equal(t, []string{"-", "-", "-"}, claimTenants(t, s, q, 3))

	// A queue without tenants claims in plain order, as ever (ClaimOrder holds the details).
	q = uniq("fair-none")
	want := orderedJobs(t, s, q)
	require.Equal(t, want, ids(claim(t, s, q, len(want))))
}

func testFairTenantAlone(t *testing.T, s store.Store) {
	// One tenant alone is claimed in its claim order, whatever the claim's size.
	q, a := uniq("fair-alone"), uniq("A")
	low, high, mid := tenantJob(q, a, 0), tenantJob(q, a, 9), tenantJob(q, a, 5)
	insert(t, s, low, high, mid)
	require.Equal(t, []string{high.ID, mid.ID}, ids(claim(t, s, q, 2)))
	require.Equal(t, []string{low.ID}, ids(claim(t, s, q, 5)))

	// A job without a tenant behind a lone tenant's jobs in claim order still gets its turn.
	q = uniq("fair-alone-mixed")
	insertTenant(t, s, q, a, 10)
	insert(t, s, tenantJob(q, "", 0))
	require.ElementsMatch(t, []string{a, "-"}, claimTenants(t, s, q, 2))
	require.Equal(t, []string{a, a}, claimTenants(t, s, q, 2))
}

func testTenantWeightsAlone(t *testing.T, s store.Store) {
	// A tenant of weight 3 alone, then B arrives: A's turn goes on from where its claims alone left
	// it, then the turns alternate as ever.
	ts := tenants(t, s)
	q, a, b := uniq("weights-alone"), uniq("A"), uniq("B")
	require.NoError(t, ts.SetTenantWeight(ctx(t), a, 3))
	insertTenant(t, s, q, a, 20)
	require.Len(t, claim(t, s, q, 1), 1)
	insertTenant(t, s, q, b, 10)
	require.Equal(t, []string{a, a, b, a, a, a, b}, claimTenants(t, s, q, 7))

	// Alone again, A's claims of 4 leave its turn at 4 mod 3 = 1 taken: B, back, waits for 2 more.
	q = uniq("weights-alone-batch")
	insertTenant(t, s, q, a, 20)
	require.Len(t, claim(t, s, q, 4), 4)
	insertTenant(t, s, q, b, 10)
	require.Equal(t, []string{a, a, b, a}, claimTenants(t, s, q, 4))
}

// laterJobs returns n jobs of tenant ("" for none) in queue at priority, scheduled an hour and more
// from now.
func laterJobs(queue, tenant string, priority, n int) []*store.InsertParams {
	var params []*store.InsertParams
	for i := range n {
		p := tenantJob(queue, tenant, priority)
		p.State = store.StateScheduled
		p.ScheduledAt = time.Now().Add(time.Hour + time.Duration(i)*time.Millisecond)
		params = append(params, p)
	}
	return params
}

func testFairBesideLaterJobs(t *testing.T, s store.Store) {
	// Tenants whose jobs are all due later, on both sides of those with jobs due now and more of
	// them than a store's walk over tenants passes over one by one (PostgreSQL: 8, then one ordered
	// scan); A's job due now at a priority below its jobs due later; B's ahead of its own; jobs
	// without a tenant due now and later. A claim takes exactly the jobs due now, one of each
	// participant, and leaves every other where it was.
	q := uniq("fair-later")
	var later []*store.InsertParams
	for _, tenant := range []string{"0a", "0b", "0c", "0d", "0e", "0f", "0g", "0h", "0i", "0j"} {
		later = append(later, laterJobs(q, tenant, 0, 3)...)
	}
	later = append(later, laterJobs(q, "A", 5, 50)...)
	later = append(later, laterJobs(q, "A", 0, 50)...)
	later = append(later, laterJobs(q, "B", 3, 20)...)
	for _, tenant := range []string{"L0", "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9"} {
		later = append(later, laterJobs(q, tenant, 2, 3)...)
	}
	later = append(later, laterJobs(q, "", 1, 10)...)
	insert(t, s, later...)
	due := []*store.InsertParams{tenantJob(q, "A", 0), tenantJob(q, "B", 3), tenantJob(q, "Z", 0), tenantJob(q, "", 1)}
	insert(t, s, due...)

	jobs := claim(t, s, q, 10)
	require.ElementsMatch(t, ids(jobs), []string{due[0].ID, due[1].ID, due[2].ID, due[3].ID},
		"exactly the jobs due now")
	for _, j := range jobs {
		require.Equal(t, store.StateActive, j.State)
	}
	require.Empty(t, claim(t, s, q, 10), "nothing else is due")
	for _, p := range []*store.InsertParams{later[0], later[30], later[80], later[130], later[len(later)-1]} {
		require.Equal(t, store.StateScheduled, get(t, s, p.ID).State, "a job due later stays scheduled")
	}

	// One tenant with jobs due now among tenants with jobs due later only, on both sides: it is
	// alone, and its jobs come in its claim order.
	q = uniq("fair-later-alone")
	later = later[:0]
	for _, tenant := range []string{"0a", "0b", "0c", "0d", "0e", "0f", "0g", "0h", "0i", "L0", "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9"} {
		later = append(later, laterJobs(q, tenant, 0, 2)...)
	}
	later = append(later, laterJobs(q, "M", 9, 20)...)
	insert(t, s, later...)
	low, high := tenantJob(q, "M", 0), tenantJob(q, "M", 4)
	insert(t, s, low, high)
	require.Equal(t, []string{high.ID, low.ID}, ids(claim(t, s, q, 10)))
	require.Empty(t, claim(t, s, q, 10))
}
