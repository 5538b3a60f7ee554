package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func testNotFound(t *testing.T, s store.Store) {
	insert(t, s, job("present")) // a store with a job in it, so "not found" is about the id
	id := unknownID()
	ops := map[string]func(context.Context, string) (*store.Job, error){
		"GetJob": s.GetJob, "CancelJob": s.CancelJob, "RetryJob": s.RetryJob,
		"ActivateJob": s.ActivateJob, "DeleteJob": s.DeleteJob,
	}
	for name, op := range ops {
		j, err := op(ctx(t), id)
		require.ErrorIs(t, err, store.ErrNotFound, name)
		require.NotErrorIs(t, err, store.ErrInvalidTransition, name)
		require.Nil(t, j, name)
	}
	_, err := s.GetJob(ctx(t), id)
	require.ErrorIs(t, err, store.ErrNotFound, "no operation on an unknown id creates it")
}

// refused runs op on a job in each of states and requires a *store.TransitionError and the job as
// it was.
func refused(t *testing.T, s store.Store, opName string, op func(context.Context, string) (*store.Job, error), states ...store.State) {
	t.Helper()
	for _, st := range states {
		before := inState(t, s, "refused-"+opName, st)
		j, err := op(ctx(t), before.ID)
		requireTransitionError(t, err, before.ID, st)
		require.Nil(t, j)
		requireUnchanged(t, before, get(t, s, before.ID))
	}
}

func testCancelTerminalRefused(t *testing.T, s store.Store) {
	refused(t, s, "cancel", s.CancelJob, store.StateCompleted, store.StateCancelled, store.StateDiscarded)
}

func testRetryRefused(t *testing.T, s store.Store) {
	refused(t, s, "retry", s.RetryJob, store.StateAvailable, store.StateActive, store.StateCompleted,
		store.StateScheduled, store.StatePending, store.StateRetryable)
}

func testActivateRefused(t *testing.T, s store.Store) {
	refused(t, s, "activate", s.ActivateJob, store.StateAvailable, store.StateScheduled, store.StateActive,
		store.StateCompleted, store.StateRetryable, store.StateCancelled, store.StateDiscarded)
}

func testDeleteActiveRefused(t *testing.T, s store.Store) {
	refused(t, s, "delete", s.DeleteJob, store.StateActive)
}

func testCancelQueued(t *testing.T, s store.Store) {
	states := []store.State{store.StateAvailable, store.StateScheduled, store.StatePending, store.StateRetryable}
	for _, st := range states {
		before := inState(t, s, "cancel-queued", st)
		j, err := s.CancelJob(ctx(t), before.ID)
		require.NoError(t, err, "cancel a %s job", st)
		require.Equal(t, before.ID, j.ID)
		require.Equal(t, store.StateCancelled, j.State, "the returned job is cancelled")
		requireNow(t, j.CompletedAt, "completed_at of a cancelled job")
		got := get(t, s, before.ID)
		require.Equal(t, store.StateCancelled, got.State)
		require.Equal(t, before.Attempt, got.Attempt)
		require.Equal(t, before.Errors, got.Errors, "a cancel of a job no run holds records no error")
	}
	q, ok := queueInfo(t, s, "cancel-queued")
	require.True(t, ok)
	require.Equal(t, int64(len(states)), q.Counts[store.StateCancelled])
	for _, st := range states {
		require.Zero(t, q.Counts[st], "no %s job left", st)
	}
	require.Empty(t, claim(t, s, "cancel-queued", 10), "cancelled jobs are not claimable")
	n, err := s.Promote(ctx(t), 100)
	require.NoError(t, err)
	require.Zero(t, n, "cancelled jobs are not promoted")
}

func testCancelActive(t *testing.T, s store.Store) {
	c := listen(t, s)
	a := active(t, s, job("cancel-active"))
	j, err := s.CancelJob(ctx(t), a.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)
	requireNow(t, j.CompletedAt, "completed_at of a cancelled job")
	// The claim it ended is in the history, so that an outcome naming no claim, which may be its
	// run's, is refused after a retry (pronto.RemoteAck).
	for _, j := range []*store.Job{j, get(t, s, a.ID)} {
		require.Equal(t, store.StateCancelled, j.State)
		require.Len(t, j.Errors, 1, "the cancelled claim's entry")
		e := j.Errors[0]
		require.Equal(t, store.ErrorTypeCancelled, e.Type)
		require.Equal(t, 1, e.Attempt)
		requireNow(t, e.At, "time of the cancelled entry")
		require.WithinDuration(t, a.StartedAt, e.StartedAt, time.Millisecond, "the cancelled attempt's start")
		require.Contains(t, e.Message, worker)
	}

	eventually(t, "the cancel notification", func() bool {
		return len(c.matching(func(n store.Notification) bool {
			return n.Kind == store.NotifyCancel && n.JobID == a.ID
		})) > 0
	})
	cancels := c.matching(func(n store.Notification) bool { return n.Kind == store.NotifyCancel })
	require.Len(t, cancels, 1, "one cancel notification, for the cancelled job")
	require.NotEmpty(t, a.ClaimToken)
	require.Equal(t, a.ClaimToken, cancels[0].ClaimToken, "the notification names the run it stops")

	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: worker, IDs: []string{a.ID}, LeaseDuration: lease})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, lost, "the runner's heartbeat learns the job is gone")
	require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted}),
		"the runner's completion is not applied")
	require.Equal(t, store.StateCancelled, get(t, s, a.ID).State)
	res, err := s.Rescue(ctx(t), store.RescueParams{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, res.Requeued)
	require.Empty(t, res.Discarded)
	r, err := s.RetryJob(ctx(t), a.ID)
	require.NoError(t, err)
	require.Len(t, r.Errors, 1, "a retry keeps the cancelled claim's entry")
}

func testRetryJob(t *testing.T, s store.Store) {
	p := job("manual-retry")
	p.MaxAttempts = 1
	p.ScheduledAt = time.Now().Add(-time.Hour) // so "scheduled_at is now" is news
	a := active(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateDiscarded,
		Error: &store.AttemptError{Attempt: 1, At: time.Now(), Message: "gave up"}}))

	j, err := s.RetryJob(ctx(t), a.ID)
	require.NoError(t, err)
	for _, j := range []*store.Job{j, get(t, s, a.ID)} {
		require.Equal(t, store.StateAvailable, j.State)
		require.Equal(t, 0, j.Attempt, "a manual retry resets the attempts")
		require.Len(t, j.Errors, 1, "and keeps the error history")
		require.Equal(t, "gave up", j.Errors[0].Message)
		require.True(t, j.CompletedAt.IsZero(), "a retried job is no longer finished")
		requireNow(t, j.ScheduledAt, "scheduled_at of a retried job")
	}
	again := reclaim(t, s, "manual-retry", a.Kind, a.ID, worker, lease)
	require.Equal(t, 1, again.Attempt)

	// A cancelled job can be retried too.
	cancelled := inState(t, s, "manual-retry", store.StateCancelled)
	j, err = s.RetryJob(ctx(t), cancelled.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.Equal(t, 0, j.Attempt)
	require.Equal(t, []string{cancelled.ID}, ids(claim(t, s, "manual-retry", 10)))
}

func testDeleteJob(t *testing.T, s store.Store) {
	for _, st := range []store.State{store.StateAvailable, store.StateScheduled, store.StatePending,
		store.StateRetryable, store.StateCompleted, store.StateCancelled, store.StateDiscarded} {
		before := inState(t, s, "delete", st)
		j, err := s.DeleteJob(ctx(t), before.ID)
		require.NoError(t, err, "delete a %s job", st)
		require.Equal(t, before.ID, j.ID)
		require.Equal(t, st, j.State, "DeleteJob returns the job as it was")
		require.Equal(t, before.Kind, j.Kind)
		_, err = s.GetJob(ctx(t), before.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.DeleteJob(ctx(t), before.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "deleting twice")
	}
	_, listed := queueInfo(t, s, "delete")
	require.False(t, listed, "a queue whose jobs are all deleted is not listed")
	require.Empty(t, claim(t, s, "delete", 10))
	n, err := s.Promote(ctx(t), 100)
	require.NoError(t, err)
	require.Zero(t, n)
}
