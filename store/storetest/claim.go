package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// orderedJobs inserts, in a scrambled order, jobs of queue whose claim order is the returned order:
// priority first (highest first), then due time (earliest first, a due scheduled job among them),
// then id (lowest first).
func orderedJobs(t *testing.T, s store.Store, queue string) []string {
	now := time.Now().Truncate(time.Millisecond)
	mk := func(priority int, due time.Duration, st store.State) *store.InsertParams {
		p := job(queue)
		p.Priority = priority
		p.ScheduledAt = now.Add(due)
		p.State = st
		return p
	}
	high := mk(10, -time.Second, store.StateAvailable)
	highLater := mk(10, -500*time.Millisecond, store.StateAvailable)
	dueScheduled := mk(0, -5*time.Second, store.StateScheduled)
	early := mk(0, -3*time.Second, store.StateAvailable)
	tieLow, tieHigh := mk(0, -2*time.Second, store.StateAvailable), mk(0, -2*time.Second, store.StateAvailable)
	require.Less(t, tieLow.ID, tieHigh.ID)
	late := mk(0, -time.Second, store.StateAvailable)
	low := mk(-5, -time.Hour, store.StateAvailable)
	// Insert in an order that matches no sort key.
	insert(t, s, late, tieHigh, low, highLater, tieLow, dueScheduled, early, high)
	return []string{high.ID, highLater.ID, dueScheduled.ID, early.ID, tieLow.ID, tieHigh.ID, late.ID, low.ID}
}

func testClaimOrder(t *testing.T, s store.Store) {
	want := orderedJobs(t, s, "order-one")
	var got []string
	for range want {
		jobs := claim(t, s, "order-one", 1)
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].ID)
	}
	require.Equal(t, want, got, "claims take the highest priority, then the earliest due, then the lowest id")
	require.Empty(t, claim(t, s, "order-one", 1))

	// A batch takes the first jobs in claim order, and returns them in that order.
	want = orderedJobs(t, s, "order-batch")
	jobs := claim(t, s, "order-batch", 5)
	require.Equal(t, want[:5], ids(jobs))
	jobs = claim(t, s, "order-batch", 5)
	require.Equal(t, want[5:], ids(jobs))
}

func testClaimLimit(t *testing.T, s store.Store) {
	var params []*store.InsertParams
	for range 10 {
		params = append(params, job("limit"))
	}
	insert(t, s, params...)
	first := claim(t, s, "limit", 3)
	require.Len(t, first, 3)
	rest := claim(t, s, "limit", 100)
	require.Len(t, rest, 7)
	require.ElementsMatch(t, paramIDs(params), append(ids(first), ids(rest)...), "every job claimed once")
	none, err := s.Claim(ctx(t), store.ClaimParams{Queue: "limit", Limit: 100, WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err, "an empty claim is not an error")
	require.Empty(t, none)
	q, ok := queueInfo(t, s, "limit")
	require.True(t, ok)
	require.Equal(t, int64(10), q.Counts[store.StateActive])
	require.Equal(t, int64(0), q.Counts[store.StateAvailable])
}

func testClaimOnlyItsQueue(t *testing.T, s store.Store) {
	a, b := job("queue-a"), job("queue-b")
	insert(t, s, a, b)
	require.Empty(t, claim(t, s, "queue-c", 10), "a queue without jobs yields nothing")
	require.Equal(t, []string{b.ID}, ids(claim(t, s, "queue-b", 10)))
	require.Equal(t, []string{a.ID}, ids(claim(t, s, "queue-a", 10)))
}

func testClaimKinds(t *testing.T, s store.Store) {
	mk := func(kind string, priority int) *store.InsertParams {
		p := job("kinds")
		p.Kind = kind
		p.Priority = priority
		return p
	}
	a, b, c := mk("kind.a", 1), mk("kind.b", 3), mk("kind.c", 2)
	insert(t, s, a, b, c)

	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: "kinds", Kinds: []string{"kind.missing"}, Limit: 10,
		WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err)
	require.Empty(t, jobs, "no job of the asked kinds")

	jobs, err = s.Claim(ctx(t), store.ClaimParams{Queue: "kinds", Kinds: []string{"kind.a", "kind.c"}, Limit: 10,
		WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err)
	require.Equal(t, []string{c.ID, a.ID}, ids(jobs), "only the asked kinds, in claim order")

	require.Equal(t, []string{b.ID}, ids(claim(t, s, "kinds", 10)), "no kinds: any kind")
}

func testClaimSetsActive(t *testing.T, s store.Store) {
	p := job("claimed")
	p.MaxAttempts = 5
	insert(t, s, p)
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: "claimed", Limit: 1, WorkerID: "worker-7",
		LeaseDuration: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	for _, j := range []*store.Job{jobs[0], get(t, s, p.ID)} {
		require.Equal(t, p.ID, j.ID)
		require.Equal(t, store.StateActive, j.State)
		require.Equal(t, 1, j.Attempt, "a claim counts an attempt")
		require.Equal(t, 5, j.MaxAttempts)
		require.Equal(t, "worker-7", j.WorkerID)
		requireNow(t, j.StartedAt, "started_at")
		require.WithinDuration(t, j.StartedAt.Add(30*time.Second), j.LeaseExpiresAt, time.Second,
			"the lease runs for LeaseDuration from the claim")
		require.True(t, j.CompletedAt.IsZero())
		requireJSON(t, p.Args, j.Args, "args")
		require.Equal(t, p.Kind, j.Kind)
	}
	require.Empty(t, claim(t, s, "claimed", 1), "an active job is not claimed again")
}

func testClaimScheduledWhenDue(t *testing.T, s store.Store) {
	soon, later := job("scheduled"), job("scheduled")
	soon.State, later.State = store.StateScheduled, store.StateScheduled
	soon.ScheduledAt = time.Now().Add(100 * time.Millisecond)
	later.ScheduledAt = time.Now().Add(time.Hour)
	insert(t, s, soon, later)

	jobs := claim(t, s, "scheduled", 10)
	if time.Now().Before(soon.ScheduledAt) {
		require.Empty(t, jobs, "a job scheduled in the future is not claimable")
	}
	eventually(t, "the scheduled job to become claimable", func() bool {
		jobs = append(jobs, claim(t, s, "scheduled", 10)...)
		return len(jobs) > 0
	})
	require.Equal(t, []string{soon.ID}, ids(jobs), "only the due job is claimed")
	require.False(t, jobs[0].StartedAt.Before(soon.ScheduledAt.Add(-precision)), "not claimed before it was due")
	require.Equal(t, 1, jobs[0].Attempt)
	require.Equal(t, store.StateScheduled, get(t, s, later.ID).State)
	require.Empty(t, claim(t, s, "scheduled", 10))
}

func testClaimPendingAfterActivate(t *testing.T, s store.Store) {
	p := job("pending")
	p.State = store.StatePending
	p.ScheduledAt = time.Now().Add(-time.Hour) // so "scheduled_at is now" is news
	insert(t, s, p)
	require.Empty(t, claim(t, s, "pending", 10), "a pending job is not claimable")

	j, err := s.ActivateJob(ctx(t), p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	requireNow(t, j.ScheduledAt, "scheduled_at of an activated job")
	require.Equal(t, store.StateAvailable, get(t, s, p.ID).State)
	require.Equal(t, []string{p.ID}, ids(claim(t, s, "pending", 10)), "an activated job is claimable")
}

func testClaimExpired(t *testing.T, s store.Store) {
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	expiredAvailable, expiredScheduled, expiredPending, live := job("expiry"), job("expiry"), job("expiry"), job("expiry")
	expiredAvailable.ExpiresAt = past
	expiredScheduled.State, expiredScheduled.ScheduledAt, expiredScheduled.ExpiresAt = store.StateScheduled, past, past
	expiredPending.State, expiredPending.ExpiresAt = store.StatePending, past
	live.ExpiresAt = future
	live.Priority = -1 // claimed last, so expired jobs ahead of it would be met first
	insert(t, s, expiredAvailable, expiredScheduled, expiredPending, live)

	require.Equal(t, []string{live.ID}, ids(claim(t, s, "expiry", 10)), "expired jobs are not claimed")
	require.Empty(t, claim(t, s, "expiry", 10))

	gone, err := s.DiscardExpired(ctx(t), 100)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{expiredAvailable.ID, expiredScheduled.ID, expiredPending.ID}, ids(gone),
		"every expired job not yet started is discarded, and returned")
	for _, r := range gone {
		// Returned as stored, so that the caller can report each one as it is.
		j := get(t, s, r.ID)
		require.Equal(t, store.StateDiscarded, j.State)
		requireNow(t, j.CompletedAt, "completed_at of a discarded job")
		require.Equal(t, store.StateDiscarded, r.State)
		require.Equal(t, "expiry", r.Queue)
		require.WithinDuration(t, j.CompletedAt, r.CompletedAt, time.Millisecond)
		require.WithinDuration(t, j.ExpiresAt, r.ExpiresAt, time.Millisecond)
		require.Len(t, r.Errors, 1)
		require.Equal(t, "expired", r.Errors[0].Type)
	}
	require.Equal(t, store.StateActive, get(t, s, live.ID).State)
	gone, err = s.DiscardExpired(ctx(t), 100)
	require.NoError(t, err)
	require.Empty(t, gone)

	// Bounded by its limit.
	for range 3 {
		p := job("expiry-limit")
		p.ExpiresAt = past
		insert(t, s, p)
	}
	gone, err = s.DiscardExpired(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, gone, 2)
	gone, err = s.DiscardExpired(ctx(t), 2)
	require.NoError(t, err)
	require.Len(t, gone, 1)
}

func testClaimPaused(t *testing.T, s store.Store) {
	var params []*store.InsertParams
	for range 3 {
		params = append(params, job("paused"))
	}
	other := job("unpaused")
	insert(t, s, append(params, other)...)

	require.NoError(t, s.PauseQueue(ctx(t), "paused"))
	require.Empty(t, claim(t, s, "paused", 10), "a paused queue yields nothing")
	require.Equal(t, []string{other.ID}, ids(claim(t, s, "unpaused", 10)), "pausing one queue leaves the others")
	q, ok := queueInfo(t, s, "paused")
	require.True(t, ok)
	require.True(t, q.Paused)
	require.Equal(t, int64(3), q.Counts[store.StateAvailable], "pausing keeps the jobs available")

	// A paused queue without jobs is listed; pausing twice is harmless.
	require.NoError(t, s.PauseQueue(ctx(t), "empty-paused"))
	require.NoError(t, s.PauseQueue(ctx(t), "empty-paused"))
	q, ok = queueInfo(t, s, "empty-paused")
	require.True(t, ok, "a paused queue is listed even without jobs")
	require.True(t, q.Paused)

	require.NoError(t, s.ResumeQueue(ctx(t), "paused"))
	q, _ = queueInfo(t, s, "paused")
	require.False(t, q.Paused)
	require.ElementsMatch(t, paramIDs(params), ids(claim(t, s, "paused", 10)), "resuming restores claims")

	// A job inserted while paused waits for the resume.
	require.NoError(t, s.PauseQueue(ctx(t), "paused"))
	late := job("paused")
	insert(t, s, late)
	require.Empty(t, claim(t, s, "paused", 10))
	require.NoError(t, s.ResumeQueue(ctx(t), "paused"))
	require.Equal(t, []string{late.ID}, ids(claim(t, s, "paused", 10)))
}

// unknownID returns an id no store holds.
func unknownID() string { return uuidv7.New() }
