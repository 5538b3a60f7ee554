package redis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// A job handed to a waiter whose reply from Redis is lost in flight (its connection failing, or the
// store closing, as the inbox's pop is answered) goes back unstarted with its attempt refunded, as
// an unserved hand-off does, instead of waiting a whole lease for the rescue, which counts the
// attempt (and discards a job of one attempt that never ran).

// loseReplies makes the waiters of s lose the replies of their inbox pops; each loss is reported on
// the returned channel after wait returns (nil: at once).
func loseReplies(t *testing.T, s *Store, wait func()) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 16)
	f := func(w *waiter) bool {
		if w.s != s {
			return false
		}
		select {
		case ch <- struct{}{}:
		default:
		}
		if wait != nil {
			wait()
		}
		return true
	}
	// Tests setting the hook do not run in parallel with each other (the hook is the package's).
	require.True(t, loseHanded.CompareAndSwap(nil, &f), "another test loses replies")
	t.Cleanup(func() { loseHanded.Store(nil) })
	return ch
}

// requireGivenBack checks that job id is available again with its attempt refunded: Attempt kept
// (the hand-off's), MaxAttempts one more, no error recorded.
func requireGivenBack(t *testing.T, s *Store, id string, maxAttempts int) {
	t.Helper()
	got, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
	require.Equal(t, 1, got.Attempt, "handed: the insert claimed it")
	require.Equal(t, maxAttempts+1, got.MaxAttempts, "the attempt not run is refunded")
	require.Empty(t, got.Errors)
}

// TestHandoffGiveBackReplyLost: the inbox pop's reply is lost with the waiter's connection. The job
// comes back available, its one attempt refunded, once the waiter has a connection again. Before,
// the job had left the inbox for good and stayed active for its whole lease.
func TestHandoffGiveBackReplyLost(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("gb-lost"))
	require.NoError(t, err)
	lost := loseReplies(t, a, nil)
	in := testJob("gb-lost")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing handed")
	}
	loseHanded.Store(nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		if got.State == store.StateAvailable {
			break
		}
		require.False(t, time.Now().After(deadline), "the job is %s", got.State)
		time.Sleep(5 * time.Millisecond)
	}
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackClose: the store closes as the inbox pop is answered, and the reply is lost
// (the pop's connection is ended by the close). Once Close returns the job is available, its
// attempt refunded. Before, it stayed active until its lease ended.
func TestHandoffGiveBackClose(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("gb-close"))
	require.NoError(t, err)
	lost := loseReplies(t, a, func() { <-a.waitCtx.Done() })
	in := testJob("gb-close")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing handed")
	}
	require.NoError(t, a.Close())
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackRetried: the reply of a handed job's pop is lost, and the waiter's give-back
// of it fails once the got list is read (Redis failing before the job is returned), while the
// waiter goes on popping: a next job is handed and received. The lost job is still given back,
// its attempt refunded, once Redis answers. Before, the got list was emptied by the read that
// preceded the failed return (and by the next job's receipt): the job stayed active for its whole
// lease and the rescue spent its only attempt.
func TestHandoffGiveBackRetried(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("gb-retry")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)

	failed := make(chan struct{}, 16)
	var failing atomic.Bool
	failing.Store(true)
	f := func(w *waiter) bool {
		if w.s != a || !failing.Load() {
			return false
		}
		select {
		case failed <- struct{}{}:
		default:
		}
		return true
	}
	require.True(t, failGiveBack.CompareAndSwap(nil, &f), "another test fails give-backs")
	t.Cleanup(func() { failGiveBack.Store(nil) })

	lost := loseReplies(t, a, nil)
	in := testJob("gb-retry")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	for _, ch := range []<-chan struct{}{lost, failed} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("the reply was not lost, or the give-back not tried")
		}
	}
	loseHanded.Store(nil)

	// The producer claims again (advertising itself), and the next job is handed and received.
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	next := testJob("gb-retry")
	_, err = b.Insert(ctx, []*store.InsertParams{next})
	require.NoError(t, err)
	j := handedTo(t, loop, a, p, notes)
	require.Equal(t, next.ID, j.ID)

	failing.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		if got.State == store.StateAvailable {
			break
		}
		require.False(t, time.Now().After(deadline), "the job is %s", got.State)
		time.Sleep(5 * time.Millisecond)
	}
	requireGivenBack(t, b, in.ID, 1)
	got, err := b.GetJob(ctx, next.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "the job received was given back")
	require.Equal(t, j.ClaimToken, got.ClaimToken)
}

// onStep runs f at each handoffStep of a's waiters.
func onStep(t *testing.T, a *Store, f func(w *waiter, step string)) {
	t.Helper()
	g := func(w *waiter, step string) {
		if w.s == a {
			f(w, step)
		}
	}
	// Tests setting the hook do not run in parallel with each other (the hook is the package's).
	require.True(t, handoffStep.CompareAndSwap(nil, &g), "another test watches the steps")
	t.Cleanup(func() { handoffStep.Store(nil) })
}

// closeDuring starts a.Close and waits until it has cancelled the waiters' context; the returned
// channel is closed once Close returns.
func closeDuring(t *testing.T, a *Store) <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = a.Close()
	}()
	select {
	case <-a.waitCtx.Done():
	case <-time.After(30 * time.Second):
		t.Error("Close did not stop the waiters")
	}
	return closed
}

// waitClosed waits for the channel of closeDuring.
func waitClosed(t *testing.T, closed <-chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestHandoffRetireDuringClose: a waiter retires (unused) as the store closes, a job handed to it
// just before: once Close returns the job is available, its attempt refunded, and the waiter's
// goroutine has ended. Before, Close did not wait for a retiring waiter, whose cleanup ran under
// the context Close cancels and failed: the job stayed active for its whole lease.
func TestHandoffRetireDuringClose(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("gb-retire")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	a.waitersMu.Lock()
	require.Len(t, a.waiters, 1)
	var w *waiter
	for _, one := range a.waiters {
		w = one
	}
	a.waitersMu.Unlock()

	in := testJob("gb-retire")
	in.MaxAttempts = 1
	var closed <-chan struct{}
	onStep(t, a, func(_ *waiter, step string) {
		if step != "retire" || closed != nil {
			return
		}
		// Handed as the waiter leaves its inbox for good; then the store closes.
		_, err := b.Insert(ctx, []*store.InsertParams{in})
		require.NoError(t, err)
		closed = closeDuring(t, a)
	})
	w.used.Store(0) // unused: it retires at its next empty pop
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not end")
	}
	require.NotNil(t, closed)
	waitClosed(t, closed)
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffExpireDuringClose: the store closes while a waiter returns a handed job its producer
// did not take: once Close returns the job is available, its attempt refunded. Before, the return
// ran under the context Close cancels and failed, the job already out of the buffer: it stayed
// active for its whole lease.
func TestHandoffExpireDuringClose(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("gb-expire"))
	require.NoError(t, err)
	in := testJob("gb-expire")
	in.MaxAttempts = 1
	reached := make(chan (<-chan struct{}), 1)
	onStep(t, a, func(_ *waiter, step string) {
		if step == "expire" && len(reached) == 0 {
			reached <- closeDuring(t, a)
		}
	})
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	select {
	case closed := <-reached:
		waitClosed(t, closed)
	case <-time.After(30 * time.Second):
		t.Fatal("the handed job was not returned")
	}
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffClaimDuringClose: a producer's claim runs as the store closes, its advertisement
// written after Close withdrew the advertisements: a job inserted after is not handed to the
// closed store. Before, the insert handed it to the advertisement, onto an inbox nobody popped
// any more: the job stayed active for its whole lease.
func TestHandoffClaimDuringClose(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("gb-claimclose")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	onStep(t, a, func(_ *waiter, step string) {
		if step == "claim" {
			require.NoError(t, a.Close())
		}
	})
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	in := testJob("gb-claimclose")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State, "handed to the closed store")
}
