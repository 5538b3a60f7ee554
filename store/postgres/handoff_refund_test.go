package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// A refund keeps Attempt (monotonic, so a stale outcome never matches a later claim) and grows
// MaxAttempts by one: the budget MaxAttempts - Attempt is what it was before the hand-off.

// TestHandoffRefundKeepsBudget: a job of one attempt handed to a producer that never claims it goes
// back to available within serveWithin with its one attempt still to spend, and the next claim runs
// it as that one attempt (Attempt == MaxAttempts: not yet spent).
func TestHandoffRefundKeepsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.handoff.serveWithin = serveWithin
	_, err := a.Claim(loop, loopClaim("refund"))
	require.NoError(t, err)
	in := params("refund")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	var got *store.Job
	require.Eventually(t, func() bool {
		got, err = b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		return got.State == store.StateAvailable
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, got.Attempt, "handed: the insert claimed it")
	require.Equal(t, in.MaxAttempts, got.MaxAttempts-got.Attempt, "the unserved hand-off cost no budget")
	require.Empty(t, got.Errors)

	jobs, err := b.Claim(ctx, store.ClaimParams{Queue: "refund", Limit: 1, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, jobs[0].MaxAttempts, jobs[0].Attempt, "the job's one attempt runs now")
	res, err := b.Finish(ctx, []store.Completion{{ID: in.ID, Attempt: jobs[0].Attempt, Token: jobs[0].ClaimToken, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
}

// TestHandoffRefundFenced: returning a handed job applies only under its own claim: a wrong token or
// attempt changes nothing, a second return refunds nothing more, and once the job is claimed again
// the first hand-off's return leaves the new run alone.
func TestHandoffRefundFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t) // a's handed jobs stay buffered for a minute
	p := loopClaim("refund-fence")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	in := params("refund-fence")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)
	require.Eventually(t, func() bool { return !w.empty() }, 10*time.Second, time.Millisecond)
	handed := w.buf.Drain()
	require.Len(t, handed, 1)
	j := handed[0]
	require.Equal(t, 1, j.Attempt)

	state := func() *store.Job {
		t.Helper()
		got, err := b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		return got
	}
	for _, stale := range []store.Job{
		{ID: j.ID, Attempt: j.Attempt, ClaimToken: uuidv7.New()}, // another claim's token
		{ID: j.ID, Attempt: 0, ClaimToken: j.ClaimToken},         // another attempt
	} {
		a.release(ctx, []*store.Job{&stale})
		got := state()
		require.Equal(t, store.StateActive, got.State, "a return under %+v applied", stale)
		require.Equal(t, in.MaxAttempts, got.MaxAttempts)
	}

	a.release(ctx, handed)
	got := state()
	require.Equal(t, store.StateAvailable, got.State)
	require.Equal(t, in.MaxAttempts+1, got.MaxAttempts)
	a.release(ctx, handed)
	require.Equal(t, in.MaxAttempts+1, state().MaxAttempts, "a second return refunded again")

	jobs, err := b.Claim(ctx, store.ClaimParams{Queue: "refund-fence", Limit: 1, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt)
	a.release(ctx, handed)
	got = state()
	require.Equal(t, store.StateActive, got.State, "the first hand-off's return took the new run's job")
	require.Equal(t, jobs[0].ClaimToken, got.ClaimToken)
	require.Equal(t, in.MaxAttempts+1, got.MaxAttempts)
}
