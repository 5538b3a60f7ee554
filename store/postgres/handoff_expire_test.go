package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestHandoffUnservedReturnRetried: a handed job its producer does not take within serveWithin goes
// back (expire), and that return fails, the listener up all along (here the statement is cancelled
// while a lock holds the job's row; an outage does the same). The job must still come back,
// unstarted and refunded, once the database lets it. Before, the failure was only logged: the job,
// taken out of the waiter's buffer and settled, stayed active, claimed by nobody, until its lease
// ended and the rescue spent its only attempt.
func TestHandoffUnservedReturnRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.handoff.serveWithin = 2 * time.Second // set before any hand-off reads it
	const queue = "giveback-expire"
	p := loopClaim(queue)
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)

	in := params(queue)
	in.MaxAttempts = 1
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	// A lock on the job's row holds the return's update, which the test then cancels.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var lockPID int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM `+b.expand.Replace("{schema}")+
		`.jobs WHERE id = $1 FOR UPDATE`, in.ID).Scan(&lockPID))
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "not handed to a")

	var blocked int32
	require.Eventually(t, func() bool {
		err := b.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`,
			lockPID).Scan(&blocked)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the return's update never waited for the lock")
	require.True(t, a.handoff.listening.Load())
	require.True(t, w.empty(), "the job is still the waiter's to take")
	var cancelled bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_cancel_backend($1)", blocked).Scan(&cancelled))
	require.True(t, cancelled)
	require.NoError(t, tx.Rollback(ctx))

	waitState(t, b, in.ID, store.StateAvailable)
	requireGivenBack(t, b, in.ID, 1)
}
