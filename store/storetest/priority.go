package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// testSetJobPriorityOrder: an available job whose priority changed is claimed in its new order, for
// plain jobs, a tenant's jobs and rate-keyed jobs (each filed in its own claim structure).
func testSetJobPriorityOrder(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name  string
		setup func(p *store.InsertParams)
	}{
		{"plain", func(*store.InsertParams) {}},
		{"tenant", func(p *store.InsertParams) { p.Tenant = "acme" }},
		{"rate key", func(p *store.InsertParams) { p.RateKey = "unlimited-key" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := uniq("prio-order")
			a, b, c := job(q), job(q), job(q)
			for _, p := range []*store.InsertParams{a, b, c} {
				tc.setup(p)
			}
			insert(t, s, a, b, c) // same priority: claimed a, b, c unless changed

			j, prev, err := s.SetJobPriority(ctx(t), c.ID, 5)
			require.NoError(t, err)
			require.Equal(t, 0, prev)
			require.Equal(t, 5, j.Priority)
			require.Equal(t, store.StateAvailable, j.State)
			require.Equal(t, 5, get(t, s, c.ID).Priority)
			_, prev, err = s.SetJobPriority(ctx(t), a.ID, -5)
			require.NoError(t, err)
			require.Equal(t, 0, prev)

			var got []string
			for range 3 {
				jobs := claim(t, s, q, 1)
				require.Len(t, jobs, 1)
				got = append(got, jobs[0].ID)
			}
			require.Equal(t, []string{c.ID, b.ID, a.ID}, got, "raised first, lowered last")
			require.Empty(t, claim(t, s, q, 1))
		})
	}
}

// testSetJobPriorityWaiting: a scheduled or pending job keeps its new priority and is claimed in
// that order once it becomes available.
func testSetJobPriorityWaiting(t *testing.T, s store.Store) {
	q := uniq("prio-waiting")
	first := job(q)
	insert(t, s, first)
	sched := inState(t, s, q, store.StateScheduled)
	pend := inState(t, s, q, store.StatePending)

	j, prev, err := s.SetJobPriority(ctx(t), sched.ID, 10)
	require.NoError(t, err)
	require.Equal(t, 0, prev)
	require.Equal(t, store.StateScheduled, j.State)
	require.Equal(t, 10, j.Priority)
	requireTimeEqual(t, sched.ScheduledAt, j.ScheduledAt, "still due later")
	j, prev, err = s.SetJobPriority(ctx(t), pend.ID, 20)
	require.NoError(t, err)
	require.Equal(t, 0, prev)
	require.Equal(t, store.StatePending, j.State)
	require.Equal(t, 20, j.Priority)

	_, err = s.RunJobNow(ctx(t), sched.ID)
	require.NoError(t, err)
	_, err = s.ActivateJob(ctx(t), pend.ID)
	require.NoError(t, err)
	var got []string
	for range 3 {
		jobs := claim(t, s, q, 1)
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].ID)
	}
	require.Equal(t, []string{pend.ID, sched.ID, first.ID}, got)
}

// testSetJobPriorityRefused: only jobs waiting to run change priority (OJS forbids retryable ones
// too); a refused change, an unknown job or a priority out of range leaves the job as it was.
func testSetJobPriorityRefused(t *testing.T, s store.Store) {
	q := uniq("prio-refused")
	for _, st := range []store.State{store.StateActive, store.StateRetryable, store.StateCompleted,
		store.StateCancelled, store.StateDiscarded} {
		before := inState(t, s, q, st)
		_, _, err := s.SetJobPriority(ctx(t), before.ID, 7)
		requireTransitionError(t, err, before.ID, st)
		var te *store.TransitionError
		require.ErrorAs(t, err, &te)
		require.Equal(t, store.OpChangePriority, te.Operation)
		after := get(t, s, before.ID)
		requireUnchanged(t, before, after)
		require.Equal(t, before.Priority, after.Priority, "%s job keeps its priority", st)
	}

	_, _, err := s.SetJobPriority(ctx(t), uuidv7.New(), 1)
	require.ErrorIs(t, err, store.ErrNotFound)

	avail := inState(t, s, q, store.StateAvailable)
	for _, p := range []int{store.PriorityMin - 1, store.PriorityMax + 1, 1 << 40} {
		_, _, err := s.SetJobPriority(ctx(t), avail.ID, p)
		require.ErrorIs(t, err, store.ErrInvalidParams, "priority %d", p)
		require.Contains(t, err.Error(), "-100")
		require.Equal(t, 0, get(t, s, avail.ID).Priority)
	}
	for _, p := range []int{store.PriorityMax, store.PriorityMin, 0} {
		j, _, err := s.SetJobPriority(ctx(t), avail.ID, p)
		require.NoError(t, err, "priority %d", p)
		require.Equal(t, p, j.Priority)
		require.Equal(t, p, get(t, s, avail.ID).Priority)
	}
	_, prev, err := s.SetJobPriority(ctx(t), avail.ID, 0)
	require.NoError(t, err, "the same priority again")
	require.Equal(t, 0, prev)
}
