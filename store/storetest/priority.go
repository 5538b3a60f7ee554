package storetest

import (
	"testing"
	"time"

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

// testCountAvailableByPriority: the priority distribution of a queue's available jobs
// (ojs-priority.md §10.3) counts plain jobs, a tenant's and rate-keyed ones (each filed in its own
// claim structure), at both ends of the range, and nothing else: not scheduled, pending, active or
// cancelled jobs, nor another queue's; it follows claims, priority changes and cancels.
func testCountAvailableByPriority(t *testing.T, s store.Store) {
	pc, ok := s.(store.PriorityCounter)
	require.True(t, ok, "every store counts available jobs by priority (store.PriorityCounter)")
	q := uniq("prio-counts")
	count := func() map[int]int64 {
		t.Helper()
		m, err := pc.CountAvailableByPriority(ctx(t), q)
		require.NoError(t, err)
		return m
	}
	require.Empty(t, count(), "a queue never used")

	at := func(prio int, setup func(p *store.InsertParams)) *store.InsertParams {
		p := job(q)
		p.Priority = prio
		if setup != nil {
			setup(p)
		}
		return p
	}
	tenant := func(p *store.InsertParams) { p.Tenant = "acme" }
	rateKey := func(p *store.InsertParams) { p.RateKey = "prio-counts-key" }
	params := []*store.InsertParams{
		at(0, nil), at(0, nil), at(0, nil), at(10, nil), at(10, nil), at(-5, nil),
		at(store.PriorityMax, nil), at(store.PriorityMin, nil),
		at(10, tenant), at(10, tenant), at(3, tenant),
		at(0, rateKey), at(7, rateKey),
	}
	insert(t, s, params...)
	sched := at(50, nil)
	sched.State = store.StateScheduled
	sched.ScheduledAt = time.Now().Add(time.Hour)
	insert(t, s, sched)
	inState(t, s, q, store.StatePending) // priority 0
	other := job(uniq("prio-counts-other"))
	other.Priority = 10
	insert(t, s, other)

	want := map[int]int64{0: 4, 10: 4, -5: 1, 3: 1, 7: 1, store.PriorityMax: 1, store.PriorityMin: 1}
	require.Equal(t, want, count())

	// Claims take jobs out of the count, whichever structure they come from.
	for _, j := range claim(t, s, q, 3) {
		want[j.Priority]--
		if want[j.Priority] == 0 {
			delete(want, j.Priority)
		}
	}
	require.Equal(t, want, count(), "after a claim of 3")

	// A priority change moves an available job between priorities; a cancel takes it out.
	var moved, cancelled *store.Job
	for _, p := range params {
		if j := get(t, s, p.ID); j.State == store.StateAvailable {
			if moved == nil {
				moved = j
			} else if cancelled == nil {
				cancelled = j
			}
		}
	}
	require.NotNil(t, cancelled, "13 jobs, 3 claimed")
	_, _, err := s.SetJobPriority(ctx(t), moved.ID, 42)
	require.NoError(t, err)
	_, err = s.CancelJob(ctx(t), cancelled.ID)
	require.NoError(t, err)
	for _, p := range []int{moved.Priority, cancelled.Priority} {
		want[p]--
		if want[p] == 0 {
			delete(want, p)
		}
	}
	want[42]++
	require.Equal(t, want, count(), "after a priority change and a cancel")

	// Once every job is claimed, nothing is left.
	for range 10 {
		if len(claim(t, s, q, 100)) == 0 {
			break
		}
	}
	require.Empty(t, count(), "every available job claimed")
}
