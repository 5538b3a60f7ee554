package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// tenantKeyedJob returns the parameters of an available job in queue of tenant with rate key key.
func tenantKeyedJob(queue, tenant, key string) *store.InsertParams {
	p := tenantJob(queue, tenant, 0)
	p.RateKey = key
	return p
}

func testRateLimitTenantWithRateKey(t *testing.T, s store.Store) {
	// A tenant's limit binds its jobs that also carry a rate key: both limits apply, and each start
	// counts against both (docs/fair-scheduling.md, "Limits"; ojs-rate-limiting.md §4.2).
	q, q2, a, b, key := uniq("tlrk"), uniq("tlrk"), uniq("A"), uniq("B"), uniq("rk")
	setLimit(t, s, store.TenantLimitKey(a), store.RateLimit{MaxActive: 1})
	setLimit(t, s, key, store.RateLimit{MaxActive: 10})
	insert(t, s, tenantKeyedJob(q, a, key), tenantKeyedJob(q, a, key), tenantKeyedJob(q, a, key))
	// B's jobs come after A's in claim order: A at its limit holds back only A's jobs.
	insert(t, s, tenantKeyedJob(q, b, key), tenantKeyedJob(q, b, key))
	// A job of A's without a rate key, in the same queue (the rate-limit path claims that queue on
	// some stores) and in another (A's limit spans queues).
	insertTenant(t, s, q, a, 1)
	insertTenant(t, s, q2, a, 1)

	got := claim(t, s, q, 10)
	require.Equal(t, map[string]int{a: 1, b: 2}, countTenants(got), "A stops at its 1 active job; B is not held back")
	require.Empty(t, claim(t, s, q, 10), "A is at its limit")
	require.Empty(t, claim(t, s, q2, 10), "A's running job with a rate key counts toward its limit in every queue")
	keyed := 0 // A's job that runs may be its one without a rate key: the turns decide
	for _, j := range got {
		if j.RateKey == key {
			keyed++
		}
	}
	require.Equal(t, int64(keyed), limitInfo(t, s, key).Active, "the rate key counts its own jobs")

	var aJob *store.Job
	for _, j := range got {
		if j.Tenant == a {
			aJob = j
		}
	}
	require.True(t, finish(t, s, store.Completion{ID: aJob.ID, Attempt: 1, State: store.StateCompleted, Token: aJob.ClaimToken}))
	require.Equal(t, map[string]int{a: 1}, countTenants(claim(t, s, q, 10)), "a finished job frees one slot")

	// A tenant's rate window counts the starts of its jobs with a rate key, here a key without a
	// stored limit, which bounds nothing itself.
	q3, c, free := uniq("tlrk"), uniq("C"), uniq("rk")
	setLimit(t, s, store.TenantLimitKey(c), store.RateLimit{Rate: 2, Period: time.Hour})
	insertTenant(t, s, q3, c, 1)
	require.Len(t, claim(t, s, q3, 10), 1)
	insert(t, s, tenantKeyedJob(q3, c, free), tenantKeyedJob(q3, c, free), tenantKeyedJob(q3, c, free))
	require.Len(t, claim(t, s, q3, 10), 1, "one start left in C's window")
	require.Empty(t, claim(t, s, q3, 10), "C's window is spent")
	require.Equal(t, int64(2), limitInfo(t, s, store.TenantLimitKey(c)).WindowCount)
}

func testRateLimitTenantInfo(t *testing.T, s store.Store) {
	// The limit stored under a tenant's limit key reports the tenant's use: its active jobs across
	// queues and its waiting ones, whatever their rate keys.
	q, q2, a, key := uniq("tlinfo"), uniq("tlinfo"), uniq("A"), uniq("rk")
	tk := store.TenantLimitKey(a)
	setLimit(t, s, tk, store.RateLimit{MaxActive: 3})
	insertTenant(t, s, q, a, 3)
	insert(t, s, tenantKeyedJob(q2, a, key), tenantKeyedJob(q2, a, key))
	insertTenant(t, s, q, uniq("B"), 2) // another tenant's jobs count for nothing here

	info := limitInfo(t, s, tk)
	require.Equal(t, int64(0), info.Active)
	require.Equal(t, int64(5), info.Waiting, "A's five available jobs")

	require.Equal(t, map[string]int{a: 2}, countTenants(claim(t, s, q2, 10)))
	got := claim(t, s, q, 10)
	require.Equal(t, 1, countTenants(got)[a], "A has room for one more")
	info = limitInfo(t, s, tk)
	require.Equal(t, int64(3), info.Active, "A's jobs running in both queues")
	require.Equal(t, int64(2), info.Waiting, "A's jobs left")

	infos, err := limiter(t, s).ListRateLimits(ctx(t))
	require.NoError(t, err)
	found := false
	for _, li := range infos {
		if li.Key == tk {
			found = true
			require.Equal(t, int64(3), li.Active, "listed")
			require.Equal(t, int64(2), li.Waiting, "listed")
		}
	}
	require.True(t, found, "the tenant's limit is listed")
}

func testRateLimitTenantPassedNotDropped(t *testing.T, s store.Store) {
	// A job passed over because its tenant is at its limit waits, whatever its rate key's OnLimit:
	// here the key (drop) has no room left once another job took it, after the tenant's job was
	// passed over (docs/rate-limits.md: a tenant's limit always waits).
	q, q2, tenant, key := uniq("tpnd"), uniq("tpnd"), uniq("T"), uniq("rk")
	setLimit(t, s, store.TenantLimitKey(tenant), store.RateLimit{MaxActive: 1})
	setLimit(t, s, key, store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop})
	insertTenant(t, s, q2, tenant, 1) // the tenant's one allowed job runs, in another queue
	require.Len(t, claim(t, s, q2, 10), 1)

	first := tenantKeyedJob(q, tenant, key) // first in claim order, held back by its tenant
	first.Priority = 5
	other := job(q) // no tenant: takes the key's one slot
	other.RateKey = key
	insert(t, s, first, other)
	var dropped []*store.Job
	got, err := s.Claim(ctx(t), store.ClaimParams{Queue: q, Limit: 10, WorkerID: worker, LeaseDuration: lease,
		OnHeldBack: func(d, _ []*store.Job) { dropped = append(dropped, d...) }})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, other.ID, got[0].ID)
	j, err := s.GetJob(ctx(t), first.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State,
		"a job passed over for its tenant's limit waits; it was dropped (errors %+v, reported %d)", j.Errors, len(dropped))
	require.Empty(t, dropped)
}

func testRateLimitTenantKeyAsRateKey(t *testing.T, s store.Store) {
	// A job whose rate key is its own tenant's limit key is bound by that limit, which counts every
	// active job of the tenant (store/tenant.go), and its start counts once.
	q, q2, tenant := uniq("tkrk"), uniq("tkrk"), uniq("T")
	tk := store.TenantLimitKey(tenant)
	setLimit(t, s, tk, store.RateLimit{MaxActive: 1})
	insertTenant(t, s, q2, tenant, 1)
	require.Len(t, claim(t, s, q2, 10), 1, "the tenant's one allowed job")
	require.Equal(t, int64(1), limitInfo(t, s, tk).Active, "GetRateLimit reports the tenant at its limit")

	insert(t, s, tenantKeyedJob(q, tenant, tk))
	require.Empty(t, claim(t, s, q, 10), "the tenant is at MaxActive 1: its job naming its limit key must wait")

	// With room for two more, two jobs naming the key and one without take exactly the room, and
	// each start counts once in the limit's window.
	q3, u := uniq("tkrk"), uniq("U")
	uk := store.TenantLimitKey(u)
	setLimit(t, s, uk, store.RateLimit{MaxActive: 2, Rate: 10, Period: time.Hour})
	insert(t, s, tenantKeyedJob(q3, u, uk), tenantKeyedJob(q3, u, uk))
	insertTenant(t, s, q3, u, 1)
	require.Len(t, claim(t, s, q3, 10), 2)
	require.Empty(t, claim(t, s, q3, 10), "the tenant is at MaxActive 2")
	info := limitInfo(t, s, uk)
	require.Equal(t, int64(2), info.Active)
	require.Equal(t, int64(2), info.WindowCount, "each start counts once")
}
