package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestHandoffGiveBackOverlappingClaimsAcrossReconnect: two claims of one producer run through one
// waiter. The first starts while the listener listens; the listener stops listening (its
// advertisements withdrawn) while it runs, and its advertisement commits after that withdrawal. A
// job handed to it then, its notification lost, must come back although a second claim, begun
// once the listener listened again, went through the same waiter before the first returned. Before,
// the waiter kept the generation of its latest claim only: the first claim's afterClaim saw the
// second's, found nothing to do, and the job stayed active, claimed by nobody, until its lease
// ended and the rescue spent its only attempt.
func TestHandoffGiveBackOverlappingClaimsAcrossReconnect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("giveback-overlap")
	lost, stopLoss := loseHanded(t, a)
	in := params("giveback-overlap")
	in.MaxAttempts = 1
	var calls atomic.Int32
	var secondErr error
	hook := func(written bool) {
		if calls.Add(1) > 2 {
			return // the second claim's
		}
		if !written {
			a.handoff.listenerDown() // simulated: the connection stays, its notifications dropped
			return
		}
		_, err := b.Insert(ctx, []*store.InsertParams{in})
		require.NoError(t, err)
		waitLost(t, lost)
		stopLoss()
		a.handoff.listenerUp()
		// The producer's next claim (another worker freed, a notification) runs to its end first.
		_, secondErr = a.Claim(loop, p)
	}
	a.handoff.adHook.Store(&hook)
	_, err := a.Claim(loop, p)
	a.handoff.adHook.Store(nil)
	require.NoError(t, err)
	require.NoError(t, secondErr)
	require.Equal(t, int32(4), calls.Load(), "the second claim did not advertise")
	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)
}

// TestHandoffClaimErrorWithdrawsLateAdvertisement: a producer's claim statement commits, its
// advertisement with it, after the listener stopped listening, and the claim then fails as it reads
// its rows (here a claimed row that cannot be decoded; a connection lost with the answer in flight
// does the same). Its advertisement, written after the withdrawal, must not take jobs whose
// notifications the listener cannot hear. Before, afterClaim ran only for a claim without error:
// the advertisement stayed, the next insert was handed to it, its notification lost, and the job
// stayed active, claimed by nobody, until its lease ended.
func TestHandoffClaimErrorWithdrawsLateAdvertisement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	const queue = "giveback-claimerr"
	p := loopClaim(queue)
	bad := params(queue)
	_, err := b.Insert(ctx, []*store.InsertParams{bad})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE `+b.expand.Replace("{schema}")+`.jobs SET errors = '[1]' WHERE id = $1`, bad.ID)
	require.NoError(t, err)

	_, _ = loseHanded(t, a) // should a job be handed to a, its notification is lost
	hook := func(written bool) {
		if !written {
			a.handoff.listenerDown()
		}
	}
	a.handoff.adHook.Store(&hook)
	_, err = a.Claim(loop, p)
	a.handoff.adHook.Store(nil)
	require.Error(t, err, "the claimed row decoded")

	in := params(queue)
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	a.handoff.listenerUp()
	waitState(t, b, in.ID, store.StateAvailable)
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	if got.Attempt > 0 { // handed, then given back: refunded
		requireGivenBack(t, b, in.ID, 1)
	}
}
