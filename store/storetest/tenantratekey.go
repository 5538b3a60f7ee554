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
