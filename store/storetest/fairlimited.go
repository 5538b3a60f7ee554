package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// claimBounded is claim under a deadline: a claim that never returns (a walk that loops inside its
// transaction) fails the test with what it was doing instead of hanging the suite. The deadline
// bounds a hang; it asserts nothing about how long a claim takes.
func claimBounded(t testing.TB, s store.Store, queue string, limit int, what string) []*store.Job {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
	defer cancel()
	jobs, err := s.Claim(c, store.ClaimParams{Queue: queue, Limit: limit, WorkerID: worker, LeaseDuration: lease})
	if c.Err() != nil {
		t.Fatalf("%s: the claim of %d did not return before its deadline (the fair walk loops): %v", what, limit, err)
	}
	require.NoError(t, err, what)
	require.LessOrEqual(t, len(jobs), limit, "Claim returns at most Limit jobs")
	return jobs
}

// testFairLimitedTenantMidTurn: a tenant of weight above 1 whose turn is under way (the queue's
// fair cursor is on it, its turn not used up) and that is at its limit passes its turn: a claim
// answers at once, with the other participants' jobs and none of its own, and the tenant claims
// again once it has room.
func testFairLimitedTenantMidTurn(t *testing.T, s store.Store) {
	ts := tenants(t, s)

	// Alone in its queue.
	q, a := uniq("fair-midturn"), uniq("A")
	require.NoError(t, ts.SetTenantWeight(ctx(t), a, 3))
	setLimit(t, s, store.TenantLimitKey(a), store.RateLimit{MaxActive: 1})
	insertTenant(t, s, q, a, 3)
	first := claimBounded(t, s, q, 1, "first claim")
	require.Len(t, first, 1)
	require.Equal(t, a, first[0].Tenant)
	// A is at its limit of 1, two jobs of its turn of 3 to go.
	for _, n := range []int{1, 3} {
		require.Empty(t, claimBounded(t, s, q, n, "A at its limit"), "A is at its limit of 1")
	}
	require.True(t, finish(t, s, store.Completion{ID: first[0].ID, Attempt: 1, State: store.StateCompleted, Token: first[0].ClaimToken}))
	again := claimBounded(t, s, q, 3, "A with room again")
	require.Equal(t, map[string]int{a: 1}, countTenants(again), "A takes one job, its limit's room")

	// With other participants: the cursor is on C, whose turn is under way, when B and the jobs
	// without a tenant come; C at its limit passes, the others take their turns.
	q2, b, c := uniq("fair-midturn"), uniq("B"), uniq("C")
	require.NoError(t, ts.SetTenantWeight(ctx(t), c, 3))
	setLimit(t, s, store.TenantLimitKey(c), store.RateLimit{MaxActive: 1})
	insertTenant(t, s, q2, c, 3)
	require.Equal(t, map[string]int{c: 1}, countTenants(claimBounded(t, s, q2, 1, "C's first")))
	insertTenant(t, s, q2, b, 2)
	insertTenant(t, s, q2, "", 2)
	got := claimBounded(t, s, q2, 1, "C at its limit, B and no tenant waiting")
	require.Len(t, got, 1)
	require.NotEqual(t, c, got[0].Tenant, "C is at its limit of 1")
	rest := claimBounded(t, s, q2, 10, "C at its limit, the rest of B and no tenant")
	counts := countTenants(append(got, rest...))
	require.Equal(t, map[string]int{b: 2, "": 2}, counts, "every job but C's, none of C's")
	require.Empty(t, claimBounded(t, s, q2, 10, "only C left, at its limit"))
}
