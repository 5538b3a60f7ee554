package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// requireReleased requires a finished job to hold no lease and no worker.
func requireReleased(t testing.TB, j *store.Job) {
	t.Helper()
	require.True(t, j.LeaseExpiresAt.IsZero(), "a finished attempt holds no lease")
	require.Empty(t, j.WorkerID, "a finished attempt has no worker")
}

func testFinishCompleted(t *testing.T, s store.Store) {
	a := active(t, s, job("finish"))
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`{"ok":true,"sent":3}`)}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateCompleted, j.State)
	require.JSONEq(t, `{"ok":true,"sent":3}`, string(j.Result))
	requireNow(t, j.CompletedAt, "completed_at")
	require.False(t, j.CompletedAt.Before(a.StartedAt.Add(-precision)), "completed after it started")
	require.Equal(t, 1, j.Attempt)
	require.Empty(t, j.Errors)
	requireReleased(t, j)
	require.Empty(t, claim(t, s, "finish", 10), "a completed job is not claimed again")
}

func testFinishRetryable(t *testing.T, s store.Store) {
	p := job("retry")
	p.MaxAttempts = 5
	a := active(t, s, p)

	retryable := true
	first := store.AttemptError{Attempt: 1, At: time.Now().Truncate(time.Millisecond), Type: "*net.OpError",
		Message: "connection refused", Trace: "goroutine 1 [running]:\nmain.main()", Retryable: &retryable,
		Details: json.RawMessage(`{"code":42}`)}
	// Due now (a zero ScheduledAt): claimable at once.
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateRetryable, Error: &first}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateRetryable, j.State)
	requireNow(t, j.ScheduledAt, "scheduled_at of a retry due now")
	requireReleased(t, j)
	require.True(t, j.CompletedAt.IsZero(), "a retryable job has not completed")
	require.Len(t, j.Errors, 1)
	e := j.Errors[0]
	require.Equal(t, 1, e.Attempt)
	require.WithinDuration(t, first.At, e.At, precision)
	require.Equal(t, first.Type, e.Type)
	require.Equal(t, first.Message, e.Message)
	require.Equal(t, first.Trace, e.Trace)
	require.NotNil(t, e.Retryable)
	require.True(t, *e.Retryable)
	require.JSONEq(t, `{"code":42}`, string(e.Details))
	requireTimeEqual(t, a.StartedAt, e.StartedAt, "started_at of the failed attempt: the store records it")

	again := reclaim(t, s, "retry", a.Kind, a.ID, worker, lease)
	require.Equal(t, 2, again.Attempt, "a due retryable job is claimable, as its next attempt")

	// Due in an hour: not claimable, and its due time is what NextDue reports.
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	second := store.AttemptError{Attempt: 2, At: time.Now(), Message: "still refused"}
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 2, State: store.StateRetryable,
		ScheduledAt: due, Error: &second}))
	j = get(t, s, a.ID)
	require.Equal(t, store.StateRetryable, j.State)
	requireTimeEqual(t, due, j.ScheduledAt, "scheduled_at of a retry")
	require.Len(t, j.Errors, 2, "errors accumulate")
	require.Equal(t, "connection refused", j.Errors[0].Message, "oldest first")
	require.Equal(t, "still refused", j.Errors[1].Message)
	require.Equal(t, 2, j.Errors[1].Attempt)
	require.Nil(t, j.Errors[1].Retryable)
	requireTimeEqual(t, a.StartedAt, j.Errors[0].StartedAt, "the first attempt's start is kept")
	requireTimeEqual(t, again.StartedAt, j.Errors[1].StartedAt, "each attempt error has its own attempt's start")
	require.False(t, j.Errors[1].StartedAt.Before(j.Errors[0].StartedAt), "the second attempt started after the first")
	require.Empty(t, claim(t, s, "retry", 10), "a retry due later is not claimable")
	next, ok, err := s.NextDue(ctx(t), "retry")
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, due, next, precision)
}

func testFinishSnooze(t *testing.T, s store.Store) {
	p := job("snooze")
	p.MaxAttempts = 2
	a := active(t, s, p)
	due := time.Now().Add(150 * time.Millisecond)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateScheduled,
		ScheduledAt: due, RefundAttempt: true}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateScheduled, j.State)
	require.Equal(t, 3, j.MaxAttempts, "a refunded attempt grows max_attempts by one")
	require.Equal(t, 1, j.Attempt, "attempt never decreases")
	require.Empty(t, j.Errors, "a snooze is no failure")
	requireTimeEqual(t, due, j.ScheduledAt)
	requireReleased(t, j)

	var jobs []*store.Job
	eventually(t, "the snoozed job to fall due", func() bool {
		jobs = claim(t, s, "snooze", 10)
		if len(jobs) == 0 {
			require.True(t, time.Now().Before(due.Add(near)), "snoozed job overdue and not claimable")
		}
		return len(jobs) > 0
	})
	require.Equal(t, []string{a.ID}, ids(jobs))
	require.False(t, jobs[0].StartedAt.Before(due.Add(-precision)), "not claimed before it was due")
	require.Equal(t, 2, jobs[0].Attempt)
	require.Equal(t, 3, jobs[0].MaxAttempts)
}

func testFinishDiscarded(t *testing.T, s store.Store) {
	a := active(t, s, job("discard"))
	nonRetryable := false
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateDiscarded,
		Error: &store.AttemptError{Attempt: 1, At: time.Now(), Type: "panic", Message: "boom", Retryable: &nonRetryable}}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateDiscarded, j.State)
	requireNow(t, j.CompletedAt, "completed_at of a discarded job")
	require.Len(t, j.Errors, 1)
	require.Equal(t, "panic", j.Errors[0].Type)
	require.Equal(t, "boom", j.Errors[0].Message)
	require.NotNil(t, j.Errors[0].Retryable)
	require.False(t, *j.Errors[0].Retryable)
	requireReleased(t, j)
	require.Empty(t, claim(t, s, "discard", 10))
}

func testFinishCancelled(t *testing.T, s store.Store) {
	a := active(t, s, job("cancel-finish"))
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCancelled}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateCancelled, j.State)
	requireNow(t, j.CompletedAt, "completed_at of a cancelled job")
	requireReleased(t, j)
	require.Empty(t, claim(t, s, "cancel-finish", 10))
}

func testFinishAvailable(t *testing.T, s store.Store) {
	p := job("returned")
	p.MaxAttempts = 1
	p.ScheduledAt = time.Now().Add(-time.Hour) // so "scheduled_at is now" is news
	a := active(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateAvailable, RefundAttempt: true}))
	j := get(t, s, a.ID)
	require.Equal(t, store.StateAvailable, j.State)
	requireNow(t, j.ScheduledAt, "scheduled_at of a job returned unfinished")
	require.False(t, j.ScheduledAt.Before(a.StartedAt.Add(-precision)), "scheduled_at moves to now")
	require.Equal(t, 2, j.MaxAttempts)
	require.True(t, j.CompletedAt.IsZero())
	requireReleased(t, j)

	again := reclaim(t, s, "returned", a.Kind, a.ID, worker, lease)
	require.Equal(t, 2, again.Attempt, "a job returned unfinished runs again")

	// At the bound, a refund keeps the bound rather than leaving the range every store can hold.
	p = job("returned-at-bound")
	p.MaxAttempts = store.MaxAttemptsLimit
	b := active(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: b.ID, Attempt: 1, State: store.StateAvailable, RefundAttempt: true}))
	j = get(t, s, b.ID)
	require.Equal(t, store.StateAvailable, j.State)
	require.Equal(t, store.MaxAttemptsLimit, j.MaxAttempts)
}

func testFinishStale(t *testing.T, s store.Store) {
	a := active(t, s, job("stale"))
	for _, attempt := range []int{0, 2} {
		require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: attempt, State: store.StateCompleted}),
			"a completion for attempt %d of a job in attempt 1 is stale", attempt)
		j := get(t, s, a.ID)
		require.Equal(t, store.StateActive, j.State)
		require.Equal(t, worker, j.WorkerID)
	}
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`"first"`)}))
	done := get(t, s, a.ID)

	// The same completion again, or another outcome of the finished attempt, changes nothing.
	require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`"second"`)}))
	require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateRetryable,
		Error: &store.AttemptError{Attempt: 1, At: time.Now(), Message: "late"}}))
	j := get(t, s, a.ID)
	requireUnchanged(t, done, j)
	require.JSONEq(t, `"first"`, string(j.Result))
}

func testFinishAfterCancel(t *testing.T, s store.Store) {
	a := active(t, s, job("cancelled-meanwhile"))
	_, err := s.CancelJob(ctx(t), a.ID)
	require.NoError(t, err)
	cancelled := get(t, s, a.ID)
	require.False(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`{"late":true}`)}), "a cancelled job is not completed by its runner")
	j := get(t, s, a.ID)
	requireUnchanged(t, cancelled, j)
	require.Equal(t, store.StateCancelled, j.State)
	require.Empty(t, j.Result)
}

func testFinishUnknown(t *testing.T, s store.Store) {
	id := unknownID()
	require.False(t, finish(t, s, store.Completion{ID: id, Attempt: 1, State: store.StateCompleted}))
	_, err := s.GetJob(ctx(t), id)
	require.ErrorIs(t, err, store.ErrNotFound, "finishing an unknown job creates nothing")
}

func testFinishBatch(t *testing.T, s store.Store) {
	var act []*store.Job
	for range 4 {
		act = append(act, active(t, s, job("batch-finish")))
	}
	queued := job("batch-finish")
	insert(t, s, queued)
	missing := unknownID()
	cs := []store.Completion{
		{ID: act[0].ID, Attempt: 1, State: store.StateCompleted},
		{ID: missing, Attempt: 1, State: store.StateCompleted},
		{ID: act[1].ID, Attempt: 1, State: store.StateDiscarded},
		{ID: act[2].ID, Attempt: 7, State: store.StateCompleted},
		{ID: queued.ID, Attempt: 0, State: store.StateCompleted},
		{ID: act[3].ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: time.Now().Add(time.Hour)},
	}
	res, err := s.Finish(ctx(t), cs)
	require.NoError(t, err)
	require.Len(t, res, len(cs))
	wantApplied := []bool{true, false, true, false, false, true}
	for i, r := range res {
		require.Equal(t, cs[i].ID, r.ID, "results come in the order of the completions")
		require.Equal(t, wantApplied[i], r.Applied, "completion %d", i)
	}
	require.Equal(t, store.StateCompleted, get(t, s, act[0].ID).State)
	require.Equal(t, store.StateDiscarded, get(t, s, act[1].ID).State)
	require.Equal(t, store.StateActive, get(t, s, act[2].ID).State)
	require.Equal(t, store.StateAvailable, get(t, s, queued.ID).State, "an available job cannot be completed")
	require.Equal(t, store.StateRetryable, get(t, s, act[3].ID).State)
}

// testFinishBatchColumns: every field of a completion takes effect in a batch, whether all the
// batch's completions share its value (a store may send such a value once) or they differ.
func testFinishBatchColumns(t *testing.T, s store.Store) {
	const n = 6
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	run := func(shared bool) {
		var act []*store.Job
		for range n {
			p := job("batch-columns")
			p.MaxAttempts = 5
			act = append(act, active(t, s, p))
		}
		cs := make([]store.Completion, n)
		for i, a := range act {
			c := store.Completion{ID: a.ID, Attempt: 1, Token: a.ClaimToken, State: store.StateCompleted,
				Result: json.RawMessage(`{"same":true}`)}
			if !shared && i%2 == 1 {
				e := store.AttemptError{Attempt: 1, At: time.Now().Truncate(time.Millisecond), Type: "boom",
					Message: fmt.Sprintf("failure %d", i)}
				c = store.Completion{ID: a.ID, Attempt: 1, Token: a.ClaimToken, State: store.StateRetryable,
					ScheduledAt: later.Add(time.Duration(i) * time.Second), Error: &e, RefundAttempt: i == 3}
			}
			cs[i] = c
		}
		res, err := s.Finish(ctx(t), cs)
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Applied, "completion %d", i)
		}
		for i, c := range cs {
			j := get(t, s, c.ID)
			require.Equal(t, c.State, j.State, "job %d", i)
			requireReleased(t, j)
			if c.State == store.StateCompleted {
				require.JSONEq(t, `{"same":true}`, string(j.Result), "job %d", i)
				require.Empty(t, j.Errors)
				require.Equal(t, 5, j.MaxAttempts)
				continue
			}
			require.WithinDuration(t, c.ScheduledAt, j.ScheduledAt, precision, "job %d", i)
			require.Len(t, j.Errors, 1)
			require.Equal(t, c.Error.Message, j.Errors[0].Message)
			want := 5
			if c.RefundAttempt {
				want = 6
			}
			require.Equal(t, want, j.MaxAttempts, "job %d", i)
		}
	}
	run(true)
	run(false)
}

// testFinishStaleBesideCurrent: one Finish call holding the outcome of a job's current run and a
// stale outcome of an earlier run of the same job (an older claim) applies the current one and
// reports, in order, only that one as applied (store.FinishResult). PostgreSQL once reported both.
func testFinishStaleBesideCurrent(t *testing.T, s store.Store) {
	old := active(t, s, job("stale-beside-current"))
	require.True(t, finish(t, s, store.Completion{ID: old.ID, Attempt: old.Attempt, Token: old.ClaimToken,
		State: store.StateAvailable, RefundAttempt: true}))
	cur := reclaim(t, s, old.Queue, old.Kind, old.ID, worker, lease)
	require.NotEqual(t, old.ClaimToken, cur.ClaimToken)

	for _, stale := range []store.Completion{
		{ID: old.ID, Attempt: old.Attempt, Token: old.ClaimToken, State: store.StateDiscarded,
			Error: &store.AttemptError{Attempt: old.Attempt, At: time.Now(), Message: "stale"}},
		{ID: old.ID, Attempt: cur.Attempt, Token: old.ClaimToken, State: store.StateDiscarded}, // right attempt, old claim
	} {
		res, err := s.Finish(ctx(t), []store.Completion{
			stale,
			{ID: cur.ID, Attempt: cur.Attempt, Token: cur.ClaimToken, State: store.StateCompleted, Result: json.RawMessage(`"current"`)},
			stale,
		})
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.Equal(t, []bool{false, true, false}, []bool{res[0].Applied, res[1].Applied, res[2].Applied})
		j := get(t, s, cur.ID)
		require.Equal(t, store.StateCompleted, j.State, "the current run's outcome decides the job")
		require.Empty(t, j.Errors, "the stale outcome wrote nothing")
		require.JSONEq(t, `"current"`, string(j.Result))

		// Again, for the second form: a fresh run of a fresh job.
		old = active(t, s, job("stale-beside-current"))
		require.True(t, finish(t, s, store.Completion{ID: old.ID, Attempt: old.Attempt, Token: old.ClaimToken,
			State: store.StateAvailable, RefundAttempt: true}))
		cur = reclaim(t, s, old.Queue, old.Kind, old.ID, worker, lease)
	}
}
