package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func testHeartbeat(t *testing.T, s store.Store) {
	a := activeFor(t, s, job("beat"), "worker-a", time.Second)
	b := activeFor(t, s, job("beat"), "worker-b", time.Second)
	done := inState(t, s, "beat", store.StateCompleted)
	queued := inState(t, s, "beat", store.StateAvailable)
	missing := unknownID()

	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{
		WorkerID: "worker-a", IDs: []string{a.ID, b.ID, done.ID, queued.ID, missing}, LeaseDuration: time.Hour,
	})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{b.ID, done.ID, queued.ID, missing}, lost,
		"a heartbeat loses jobs held by another worker, not active, or unknown")

	ja := get(t, s, a.ID)
	require.Equal(t, store.StateActive, ja.State)
	requireNowPlus(t, time.Hour, ja.LeaseExpiresAt, "the extended lease")
	require.True(t, ja.LeaseExpiresAt.After(a.LeaseExpiresAt.Add(30*time.Minute)))
	requireTimeEqual(t, b.LeaseExpiresAt, get(t, s, b.ID).LeaseExpiresAt, "another worker's lease is untouched")
	require.Equal(t, "worker-b", get(t, s, b.ID).WorkerID)

	lost, err = s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: "worker-b", IDs: []string{b.ID}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Empty(t, lost)
	requireNowPlus(t, time.Hour, get(t, s, b.ID).LeaseExpiresAt, "the extended lease")
}

// rescueUntil calls Rescue until want reports the gathered results complete.
func rescueUntil(t *testing.T, s store.Store, what string, want func(store.RescueResult) bool) store.RescueResult {
	t.Helper()
	var all store.RescueResult
	eventually(t, what, func() bool {
		res, err := s.Rescue(ctx(t), store.RescueParams{Limit: 100})
		require.NoError(t, err)
		all.Requeued = append(all.Requeued, res.Requeued...)
		all.Discarded = append(all.Discarded, res.Discarded...)
		return want(all)
	})
	return all
}

func testRescueRequeues(t *testing.T, s store.Store) {
	p := job("rescue")
	p.MaxAttempts = 3
	p.ScheduledAt = time.Now().Add(-time.Hour) // so "scheduled_at is now" is news
	const leaseFor = 100 * time.Millisecond
	a := activeFor(t, s, p, "dead-worker", leaseFor)
	c := listen(t, s)

	res, err := s.Rescue(ctx(t), store.RescueParams{Limit: 100})
	require.NoError(t, err)
	if len(res.Requeued) == 0 {
		// The first pass came while the lease was live (on a slow machine it may already have run out,
		// and the first pass is the rescue).
		res = rescueUntil(t, s, "the expired lease to be rescued", func(r store.RescueResult) bool { return len(r.Requeued) > 0 })
	} else {
		require.False(t, time.Now().Before(a.LeaseExpiresAt), "a live lease is not rescued")
	}
	require.Empty(t, res.Discarded)
	require.Equal(t, []string{a.ID}, ids(res.Requeued))

	for _, j := range []*store.Job{res.Requeued[0], get(t, s, a.ID)} {
		require.Equal(t, store.StateAvailable, j.State)
		require.Equal(t, 1, j.Attempt, "the rescued attempt still counts")
		requireReleased(t, j)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "lease_expired", j.Errors[0].Type)
		require.Equal(t, 1, j.Errors[0].Attempt)
		require.NotEmpty(t, j.Errors[0].Message)
		requireNow(t, j.Errors[0].At, "time of the lease_expired error")
		requireTimeEqual(t, a.StartedAt, j.Errors[0].StartedAt, "started_at of the rescued attempt")
		requireNow(t, j.ScheduledAt, "scheduled_at of a rescued job: when it became available")
	}
	eventually(t, "the rescued job's queue to be announced", func() bool { return len(c.inserts("rescue")) > 0 })

	require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted}),
		"the dead worker's late completion is not applied")
	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: "dead-worker", IDs: []string{a.ID}, LeaseDuration: lease})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, lost)

	again := reclaim(t, s, "rescue", a.Kind, a.ID, "live-worker", lease)
	require.Equal(t, 2, again.Attempt)
	require.Equal(t, "live-worker", again.WorkerID)
}

func testRescueDiscards(t *testing.T, s store.Store) {
	p := job("rescue-spent")
	p.MaxAttempts = 1
	a := activeFor(t, s, p, "dead-worker", 100*time.Millisecond)
	res := rescueUntil(t, s, "the expired lease to be rescued", func(r store.RescueResult) bool {
		return len(r.Discarded)+len(r.Requeued) > 0
	})
	require.Empty(t, res.Requeued, "a job with no attempts left is not requeued")
	require.Equal(t, []string{a.ID}, ids(res.Discarded))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateDiscarded, j.State)
	requireNow(t, j.CompletedAt, "completed_at of a discarded job")
	requireReleased(t, j)
	require.Len(t, j.Errors, 1)
	require.Equal(t, "lease_expired", j.Errors[0].Type)
	require.Empty(t, claim(t, s, "rescue-spent", 10))
}

func testRescueSparesHeartbeated(t *testing.T, s store.Store) {
	const leaseFor = 200 * time.Millisecond
	beating := activeFor(t, s, job("rescue-beat"), "worker", leaseFor)
	silent := activeFor(t, s, job("rescue-beat"), "worker", leaseFor)
	long := activeFor(t, s, job("rescue-beat"), "worker", time.Hour)
	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: "worker", IDs: []string{beating.ID}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Empty(t, lost)

	res := rescueUntil(t, s, "the silent job to be rescued", func(r store.RescueResult) bool { return len(r.Requeued) > 0 })
	require.Equal(t, []string{silent.ID}, ids(res.Requeued), "only the job whose lease ran out is rescued")
	require.Empty(t, res.Discarded)
	require.Equal(t, store.StateActive, get(t, s, beating.ID).State)
	require.Equal(t, store.StateActive, get(t, s, long.ID).State)

	// A rescue pass is bounded by its limit.
	var until time.Time
	for range 3 {
		j := activeFor(t, s, job("rescue-limit"), "worker", time.Millisecond)
		until = j.LeaseExpiresAt
	}
	time.Sleep(time.Until(until.Add(10 * time.Millisecond))) // every lease has run out by now
	var counts []int
	for range 3 {
		res, err := s.Rescue(ctx(t), store.RescueParams{Limit: 2})
		require.NoError(t, err)
		counts = append(counts, len(res.Requeued)+len(res.Discarded))
	}
	require.Equal(t, []int{2, 1, 0}, counts, "Rescue takes at most Limit jobs per pass")
}

func testPromote(t *testing.T, s store.Store) {
	soonA, soonB, later := job("promote-a"), job("promote-b"), job("promote-a")
	for _, p := range []*store.InsertParams{soonA, soonB, later} {
		p.State = store.StateScheduled
	}
	soonA.ScheduledAt = time.Now().Add(50 * time.Millisecond)
	soonB.ScheduledAt = time.Now().Add(50 * time.Millisecond)
	later.ScheduledAt = time.Now().Add(time.Hour)
	retry := active(t, s, job("promote-b"))
	require.True(t, finish(t, s, store.Completion{ID: retry.ID, Attempt: 1, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(50 * time.Millisecond)}))
	insert(t, s, soonA, soonB, later)
	c := listen(t, s)

	total := 0
	eventually(t, "three due jobs to be promoted", func() bool {
		n, err := s.Promote(ctx(t), 100)
		require.NoError(t, err)
		total += n
		require.LessOrEqual(t, total, 3, "only due jobs are promoted")
		return total == 3
	})
	for _, id := range []string{soonA.ID, soonB.ID, retry.ID} {
		j := get(t, s, id)
		require.Equal(t, store.StateAvailable, j.State, "a due job is promoted to available")
	}
	require.Equal(t, 1, get(t, s, retry.ID).Attempt)
	require.Equal(t, store.StateScheduled, get(t, s, later.ID).State, "a job due later stays scheduled")
	n, err := s.Promote(ctx(t), 100)
	require.NoError(t, err)
	require.Zero(t, n)
	eventually(t, "both queues to be announced", func() bool {
		return len(c.inserts("promote-a")) > 0 && len(c.inserts("promote-b")) > 0
	})
	require.ElementsMatch(t, []string{soonB.ID, retry.ID}, ids(claim(t, s, "promote-b", 10)))

	// Promote is bounded by its limit.
	for range 3 {
		p := job("promote-limit")
		p.State, p.ScheduledAt = store.StateScheduled, time.Now().Add(-time.Second)
		insert(t, s, p)
	}
	n, err = s.Promote(ctx(t), 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.Promote(ctx(t), 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func testNextDue(t *testing.T, s store.Store) {
	_, ok, err := s.NextDue(ctx(t), "due")
	require.NoError(t, err)
	require.False(t, ok, "no scheduled job: nothing due")

	insert(t, s, job("due")) // available jobs are not "due later"
	pending := job("due")
	pending.State = store.StatePending
	insert(t, s, pending)
	_, ok, err = s.NextDue(ctx(t), "due")
	require.NoError(t, err)
	require.False(t, ok, "available and pending jobs have no due time")

	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, d := range []time.Duration{30 * time.Minute, 10 * time.Minute, 20 * time.Minute} {
		p := job("due")
		p.State, p.ScheduledAt = store.StateScheduled, base.Add(d)
		insert(t, s, p)
	}
	other := job("due-other")
	other.State, other.ScheduledAt = store.StateScheduled, base
	insert(t, s, other)

	next, ok, err := s.NextDue(ctx(t), "due")
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, base.Add(10*time.Minute), next, precision, "the earliest due time of the queue")

	// A retryable job due sooner counts.
	r := active(t, s, job("due"))
	require.True(t, finish(t, s, store.Completion{ID: r.ID, Attempt: 1, State: store.StateRetryable,
		ScheduledAt: base.Add(5 * time.Minute)}))
	next, ok, err = s.NextDue(ctx(t), "due")
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, base.Add(5*time.Minute), next, precision)

	next, ok, err = s.NextDue(ctx(t), "due-other")
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, base, next, precision)
}

func testCleanup(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Minute)
	terminal := map[store.State][]string{}
	for _, st := range []store.State{store.StateCompleted, store.StateCancelled, store.StateDiscarded} {
		for range 2 {
			terminal[st] = append(terminal[st], inState(t, s, "cleanup", st).ID)
		}
	}
	var live []string
	for _, st := range []store.State{store.StateAvailable, store.StateScheduled, store.StatePending,
		store.StateActive, store.StateRetryable} {
		live = append(live, inState(t, s, "cleanup", st).ID)
	}
	after := time.Now().Add(time.Minute)

	n, err := s.Cleanup(ctx(t), store.CleanupParams{Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "zero cut-offs keep everything")
	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: before, CancelledBefore: before,
		DiscardedBefore: before, Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "jobs finished after the cut-off are kept")

	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: after, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, n, "only completed jobs are old enough")
	requireGone(t, s, terminal[store.StateCompleted]...)
	requirePresent(t, s, terminal[store.StateCancelled]...)
	requirePresent(t, s, terminal[store.StateDiscarded]...)

	n, err = s.Cleanup(ctx(t), store.CleanupParams{CancelledBefore: after, DiscardedBefore: before, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, n, "each state has its own cut-off")
	requireGone(t, s, terminal[store.StateCancelled]...)
	requirePresent(t, s, terminal[store.StateDiscarded]...)

	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: after, CancelledBefore: after,
		DiscardedBefore: after, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireGone(t, s, terminal[store.StateDiscarded]...)
	requirePresent(t, s, live...)
	q, ok := queueInfo(t, s, "cleanup")
	require.True(t, ok)
	for _, st := range []store.State{store.StateCompleted, store.StateCancelled, store.StateDiscarded} {
		require.Zero(t, q.Counts[st])
	}
}

func testCleanupLimit(t *testing.T, s store.Store) {
	var all []string
	for range 5 {
		all = append(all, inState(t, s, "cleanup-limit", store.StateCompleted).ID)
	}
	cutoff := store.CleanupParams{CompletedBefore: time.Now().Add(time.Minute), Limit: 2}
	var counts []int
	for range 4 {
		n, err := s.Cleanup(ctx(t), cutoff)
		require.NoError(t, err)
		counts = append(counts, n)
	}
	require.Equal(t, []int{2, 2, 1, 0}, counts, "Cleanup deletes at most Limit jobs per call")
	requireGone(t, s, all...)
}

func requireGone(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := s.GetJob(ctx(t), id)
		require.ErrorIs(t, err, store.ErrNotFound, "job %s is deleted", id)
	}
}

func requirePresent(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		get(t, s, id)
	}
}

// testCleanupQueues: Queues limits a cleanup pass to some queues and SkipQueues leaves queues out
// of it (queues with a retention of their own, ojs-admin-api.md 6.6).
func testCleanupQueues(t *testing.T, s store.Store) {
	done := map[string]string{}
	for _, q := range []string{"cq-a", "cq-b", "cq-c"} {
		done[q] = inState(t, s, q, store.StateCompleted).ID
		done[q+"/cancelled"] = inState(t, s, q, store.StateCancelled).ID
	}
	later := time.Now().Add(time.Minute)
	n, err := s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: later, Queues: []string{"cq-a"}, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 1, n, "cq-a's completed job only")
	requireGone(t, s, done["cq-a"])
	requirePresent(t, s, done["cq-a/cancelled"], done["cq-b"], done["cq-c"])

	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: later, CancelledBefore: later,
		SkipQueues: []string{"cq-b"}, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 3, n, "cq-a's cancelled job, cq-c's two")
	requireGone(t, s, done["cq-a/cancelled"], done["cq-c"], done["cq-c/cancelled"])
	requirePresent(t, s, done["cq-b"], done["cq-b/cancelled"])

	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: later, CancelledBefore: later,
		Queues: []string{"cq-b"}, SkipQueues: []string{"cq-b"}, Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "a queue both named and skipped is skipped")
	requirePresent(t, s, done["cq-b"], done["cq-b/cancelled"])
}
