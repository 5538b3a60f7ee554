package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// A job handed to a producer whose process never hears of it (its notification lost with the
// listener's connection, or arriving after Close) goes back unstarted with its attempt refunded,
// as an unserved hand-off does, instead of waiting a whole lease for the rescue, which would count
// the attempt (and could discard a job of one attempt that never ran).

// loseHanded makes a's listener drop the hand-off notifications and reports each one on the
// returned channel; the returned function ends the loss.
func loseHanded(t *testing.T, a *Store) (lost <-chan string, stop func()) {
	t.Helper()
	ch := make(chan string, 16)
	f := func(payload string) bool {
		select {
		case ch <- payload:
		default:
		}
		return true
	}
	a.handoff.lose.Store(&f)
	stop = func() { a.handoff.lose.Store(nil) }
	t.Cleanup(stop)
	return ch, stop
}

// waitLost waits for a hand-off notification dropped by loseHanded.
func waitLost(t *testing.T, lost <-chan string) {
	t.Helper()
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("no hand-off notification")
	}
}

// requireGivenBack checks that job id is available again with its attempt refunded: Attempt kept
// (the hand-off's), MaxAttempts one more, no error recorded, and that its one attempt then runs.
func requireGivenBack(t *testing.T, s *Store, id string, maxAttempts int) {
	t.Helper()
	ctx := context.Background()
	got, err := s.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
	require.Equal(t, 1, got.Attempt, "handed: the insert claimed it")
	require.Equal(t, maxAttempts+1, got.MaxAttempts, "the attempt not run is refunded")
	require.Empty(t, got.Errors)
}

// waitState waits until job id is in state want (or the test's patience ends).
func waitState(t *testing.T, s *Store, id string, want store.State) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		if got.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, not %s", id, got.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHandoffGiveBackListenerDropped: the listener's connection ends (pg_terminate_backend) with a
// handed job's notification in flight. Once it listens again, the job is available, its one attempt
// refunded, while a job handed before and taken stays with its producer. Before, the lost job stayed
// active for its whole lease and the rescue then spent its only attempt.
func TestHandoffGiveBackListenerDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("giveback-drop")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)

	kept := params("giveback-drop")
	_, err = b.Insert(ctx, []*store.InsertParams{kept})
	require.NoError(t, err)
	j := handed(t, a, p, notes)
	require.Equal(t, kept.ID, j.ID)

	lost, stop := loseHanded(t, a)
	in := params("giveback-drop")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitLost(t, lost)
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "handed to a")
	stop()

	pid := a.ListenerPID()
	require.NotZero(t, pid)
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid))
	require.NoError(t, err)
	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)

	got, err = b.GetJob(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "the job a took was given back")
	require.Equal(t, j.ClaimToken, got.ClaimToken)
}

// TestHandoffGiveBackClose: a job handed the instant before Close withdraws the advertisements,
// whose notification the closing process never handles, is available once Close returns, its
// attempt refunded. Before, it stayed active until its lease ended.
func TestHandoffGiveBackClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("giveback-close"))
	require.NoError(t, err)
	lost, _ := loseHanded(t, a)
	in := params("giveback-close")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitLost(t, lost)
	require.NoError(t, a.Close())
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffTaggedToken: the hand-off's insert is the tagged one (its replacement found the token
// it replaces), and a handed job's claim token starts with its waiter's id.
func TestHandoffTaggedToken(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, sqlInsertHanded, sqlInsertHandedTagged)
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("giveback-tag")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	_, err = b.Insert(ctx, []*store.InsertParams{params("giveback-tag")})
	require.NoError(t, err)
	j := handed(t, a, p, notes)
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)
	require.Equal(t, w.id, tokenWaiter(j.ClaimToken))
}

// TestHandoffGiveBackLargeClose: a handed job too large for its notification (which names it only)
// and lost is given back at Close as a small one is.
func TestHandoffGiveBackLargeClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("giveback-large"))
	require.NoError(t, err)
	lost, _ := loseHanded(t, a)
	in := params("giveback-large")
	in.MaxAttempts = 1
	in.Args = []byte(`["` + strings.Repeat("x", 10000) + `"]`)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitLost(t, lost)
	require.NoError(t, a.Close())
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackAfterLateClaim: a claim that advertised as the listener stopped listening has
// its advertisement withdrawn (afterClaim); a job handed to it in between, its notification lost,
// is given back before the listener listens again.
func TestHandoffGiveBackAfterLateClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("giveback-late")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)
	lost, stop := loseHanded(t, a)
	in := params("giveback-late")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitLost(t, lost)
	stop()
	// As if the listener stopped listening while the claim ran: the claim's advertisement goes.
	a.handoff.listening.Store(false)
	a.handoff.afterClaim(ctx, w, a.handoff.gen.Load())
	a.handoff.listenerUp()
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackFetchFailed: a handed job too large for its notification whose read fails is
// given back at once, its attempt refunded. Before, it stayed active for its whole lease.
func TestHandoffGiveBackFetchFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("giveback-fetch"))
	require.NoError(t, err)
	a.handoff.failFetch.Store(true)
	in := params("giveback-fetch")
	in.MaxAttempts = 1
	in.Args = []byte(`["` + strings.Repeat("x", 10000) + `"]`)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackRetriedAfterFailedRelease: the give-back of a lost hand-off fails (its return
// to available is cancelled while a lock holds the job's row) as the listener's connection ends.
// The job is still given back, before the listener listens again, once the row is free. Before,
// the failure was only logged: the job stayed marked settled (never tried again) and active for its
// whole lease, and the rescue then spent its only attempt.
func TestHandoffGiveBackRetriedAfterFailedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("giveback-retry"))
	require.NoError(t, err)
	lost, stop := loseHanded(t, a)
	in := params("giveback-retry")
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitLost(t, lost)
	stop()

	// A lock on the job's row holds the give-back's update, which the test then cancels.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var lockPID int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM `+b.expand.Replace("{schema}")+
		`.jobs WHERE id = $1 FOR UPDATE`, in.ID).Scan(&lockPID))

	pid := a.ListenerPID()
	require.NotZero(t, pid)
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid))
	require.NoError(t, err)
	var blocked int32
	require.Eventually(t, func() bool {
		err := b.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`,
			lockPID).Scan(&blocked)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the give-back's update never waited for the lock")
	var cancelled bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_cancel_backend($1)", blocked).Scan(&cancelled))
	require.True(t, cancelled)
	require.NoError(t, tx.Rollback(ctx))

	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackClaimAcrossReconnect: a producer's claim starts while the listener listens,
// the listener stops listening (its advertisements withdrawn) and listens again while the claim
// runs, and the claim's advertisement commits in between: a job handed to it before the listener
// listens again, its notification lost, is given back once the claim returns. Before, afterClaim
// found the listener listening, withdrew nothing and gave nothing back: the job stayed active
// until its lease ended and the rescue spent its only attempt.
func TestHandoffGiveBackClaimAcrossReconnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("giveback-reconnect")
	lost, stopLoss := loseHanded(t, a)
	in := params("giveback-reconnect")
	in.MaxAttempts = 1
	hook := func(written bool) {
		if !written {
			// The listener's connection ends as the claim goes out (simulated: the real one stays,
			// its notifications dropped as lost).
			a.handoff.listenerDown()
			return
		}
		// The advertisement committed after the withdrawal: an insert hands it a job, whose
		// notification is lost, then the listener listens again.
		_, err := b.Insert(ctx, []*store.InsertParams{in})
		require.NoError(t, err)
		waitLost(t, lost)
		stopLoss()
		a.handoff.listenerUp()
	}
	a.handoff.adHook.Store(&hook)
	_, err := a.Claim(loop, p)
	a.handoff.adHook.Store(nil)
	require.NoError(t, err)
	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffGiveBackClaimAcrossClose: Close's hand-off part (withdrawing the advertisements,
// giving back the jobs not received) runs while a producer's claim does, whose advertisement
// commits after it: a job handed to it then, its notification lost, is given back once the claim
// returns. Before, afterClaim found the listener still listening and left the job active until its
// lease ended.
func TestHandoffGiveBackClaimAcrossClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	lost, stopLoss := loseHanded(t, a)
	in := params("giveback-claimclose")
	in.MaxAttempts = 1
	hook := func(written bool) {
		if !written {
			a.handoff.close() // Close's first step; the notifier still listens
			return
		}
		_, err := b.Insert(ctx, []*store.InsertParams{in})
		require.NoError(t, err)
		waitLost(t, lost)
		stopLoss()
	}
	a.handoff.adHook.Store(&hook)
	_, err := a.Claim(loop, loopClaim("giveback-claimclose"))
	a.handoff.adHook.Store(nil)
	require.NoError(t, err)
	requireGivenBack(t, b, in.ID, 1)
}
