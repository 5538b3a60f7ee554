package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testTenantJobs: ListParams.Tenant lists one tenant's jobs across queues and states, in id order
// both ways, with the other filters and the cursor, and nothing of other tenants (a tenant whose id
// extends it, a large tenant in the same queue, the jobs without a tenant).
func testTenantJobs(t *testing.T, s store.Store) {
	q1, q2, q3 := uniq("tjobs"), uniq("tjobs"), uniq("tjobs")
	small, large := uniq("small"), uniq("large")
	longer := small + ":x" // shares small's id as a prefix

	// The large tenant's backlog first, so the small tenant's jobs come after it in id order.
	insertTenant(t, s, q1, large, 60)
	insert(t, s, job(q1), job(q1)) // no tenant
	var want []string              // small's jobs
	add := func(ps ...*store.InsertParams) {
		insert(t, s, ps...)
		for _, p := range ps {
			want = append(want, p.ID)
		}
	}
	add(tenantJob(q1, small, 0), tenantJob(q1, small, 5))
	sched := tenantJob(q1, small, 0)
	sched.State, sched.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	pend := tenantJob(q2, small, 0)
	pend.State = store.StatePending
	add(sched, pend)
	insertTenant(t, s, q1, longer, 3)
	insertTenant(t, s, q2, large, 5)
	// Two of small's jobs in a queue of their own: one active, one completed.
	run := []*store.InsertParams{tenantJob(q3, small, 0), tenantJob(q3, small, 0)}
	add(run...)
	claimed := claim(t, s, q3, 2)
	require.Len(t, claimed, 2)
	require.True(t, finish(t, s, store.Completion{ID: claimed[0].ID, Attempt: claimed[0].Attempt,
		State: store.StateCompleted, Token: claimed[0].ClaimToken}))
	done, running := claimed[0].ID, claimed[1].ID
	insertTenant(t, s, q1, large, 5) // more of the large tenant after small's
	want = sortedIDs(want)

	// Every page size, both orders: small's jobs, and only them.
	for _, limit := range []int{1, 2, 4, 100} {
		require.Equal(t, want, listAll(t, s, store.ListParams{Tenant: small, Limit: limit}), "limit %d", limit)
		rev := slices.Clone(want)
		slices.Reverse(rev)
		require.Equal(t, rev, listAll(t, s, store.ListParams{Tenant: small, Limit: limit, Descending: true}), "limit %d, descending", limit)
	}
	jobs, next, err := s.ListJobs(ctx(t), store.ListParams{Tenant: small, Limit: 100})
	require.NoError(t, err)
	require.Empty(t, next)
	for _, j := range jobs {
		require.Equal(t, small, j.Tenant, "job %s is small's", j.ID)
	}

	// States.
	byState := func(sts ...store.State) []string {
		return listAll(t, s, store.ListParams{Tenant: small, States: sts, Limit: 2})
	}
	avail := byState(store.StateAvailable)
	require.Len(t, avail, 2)
	require.Equal(t, []string{sched.ID}, byState(store.StateScheduled))
	require.Equal(t, []string{pend.ID}, byState(store.StatePending))
	require.Equal(t, sortedIDs([]string{done, running}), byState(store.StateActive, store.StateCompleted))
	require.Equal(t, []string{running}, byState(store.StateActive))
	require.Empty(t, byState(store.StateDiscarded))
	require.Equal(t, sortedIDs(append(slices.Clone(avail), pend.ID)), byState(store.StateAvailable, store.StatePending, store.StateAvailable),
		"a state named twice lists its jobs once")

	// Other filters, with the tenant's.
	require.Equal(t, []string{pend.ID}, listAll(t, s, store.ListParams{Tenant: small, Queues: []string{q2}, Limit: 10}))
	require.Equal(t, sortedIDs([]string{done, running}), listAll(t, s, store.ListParams{Tenant: small, Queues: []string{q3}, Limit: 10}))

	// The cursor continues from a page's last id.
	page, next, err := s.ListJobs(ctx(t), store.ListParams{Tenant: small, Limit: 4})
	require.NoError(t, err)
	require.Len(t, page, 4)
	require.Equal(t, want[3], next)
	rest := listAll(t, s, store.ListParams{Tenant: small, Limit: 4, After: next})
	require.Equal(t, want[4:], rest)

	// The large tenant: all of its jobs across queues, none of small's.
	lg := listAll(t, s, store.ListParams{Tenant: large, Limit: 7})
	require.Len(t, lg, 70)
	for _, id := range want {
		require.NotContains(t, lg, id)
	}
	require.Len(t, listAll(t, s, store.ListParams{Tenant: large, Queues: []string{q2}, Limit: 3}), 5)
	require.Len(t, listAll(t, s, store.ListParams{Tenant: longer, Limit: 2}), 3, "a tenant whose id extends small's has its own jobs only")

	// An unknown tenant lists nothing.
	jobs, next, err = s.ListJobs(ctx(t), store.ListParams{Tenant: uniq("nobody"), Limit: 10})
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Empty(t, next)

	// A deleted job leaves the listing; a state change moves it.
	_, err = s.DeleteJob(ctx(t), sched.ID)
	require.NoError(t, err)
	require.Empty(t, byState(store.StateScheduled))
	_, err = s.ActivateJob(ctx(t), pend.ID)
	require.NoError(t, err)
	require.Empty(t, byState(store.StatePending))
	require.Contains(t, byState(store.StateAvailable), pend.ID)
	require.Len(t, listAll(t, s, store.ListParams{Tenant: small, Limit: 3}), len(want)-1)
}
