package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
)

// A refunded attempt keeps Attempt (it stays monotonic, so a stale run's outcome cannot match a later
// claim) and grows MaxAttempts by one: the retry budget, MaxAttempts - Attempt, is what it was before
// the claim. These tests check the budget through behaviour: a job given back unstarted later runs
// exactly as many times as its MaxAttempts allowed at insert, no fewer.

// refundRetryFast makes failed attempts retry at once, so a job's whole budget is spent quickly.
func refundRetryFast(cfg *pronto.Config) {
	cfg.RetryPolicy = pronto.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 50 * time.Millisecond}
}

// refundBudget is the attempts job id has left.
func refundBudget(t *testing.T, c *pronto.Client, id string) int {
	t.Helper()
	j := givebackGet(t, c, id)
	return j.MaxAttempts - j.Attempt
}

// TestStopGiveBackKeepsRetryBudget: jobs prefetched by a client and given back unstarted at Stop
// come back available with their whole budget, and a later client runs each failing one exactly
// MaxAttempts times (as inserted) before discarding it.
func TestStopGiveBackKeepsRetryBudget(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		const maxAttempts = 2
		w := newGivebackWorkers()
		c1 := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 1, Prefetch: 2}, nil)
		blocker := givebackInsert(t, c1, givebackArgs{}, nil)
		require.Equal(t, blocker.ID, givebackRecv(t, w.started, "run of the blocker"))
		var ids []string
		for i := range 2 {
			ids = append(ids, givebackInsert(t, c1, givebackArgs{Mode: "fail", N: i}, &pronto.InsertOpts{MaxAttempts: maxAttempts}).ID)
		}
		require.Eventually(t, func() bool { return c1.Stats().Queues[pronto.DefaultQueue].Prefetched == 2 }, 30*time.Second, time.Millisecond)
		stopped := make(chan error, 1)
		go func() { stopped <- c1.Stop(context.Background()) }()
		for _, id := range ids {
			require.Eventually(t, func() bool { return givebackGet(t, c1, id).State == pronto.StateAvailable }, 30*time.Second, 5*time.Millisecond)
		}
		w.open()
		require.NoError(t, <-stopped)
		for _, id := range ids {
			require.Zero(t, w.runs(id), "job %s ran before Stop gave it back", id)
			require.Equal(t, maxAttempts, refundBudget(t, c1, id), "job %s lost budget to a give-back that never ran it", id)
		}

		c2 := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 2}, refundRetryFast)
		for _, id := range ids {
			j := waitState(t, c2, id, pronto.StateDiscarded)
			require.Equal(t, maxAttempts, w.runs(id), "job %s ran %d times, its MaxAttempts at insert being %d", id, w.runs(id), maxAttempts)
			require.Len(t, j.Errors, maxAttempts)
		}
	})
}

// TestStoppedClientsHandedJobKeepsRetryBudget: on PostgreSQL and Redis, an idle client's producer
// advertises free slots; a job inserted after Stop, while the advertisement stands, is handed to it,
// no claim serves it, and it goes back to available. It keeps its whole budget, and a later client runs it
// exactly MaxAttempts times. (On PostgreSQL the advertisement outlives Stop while the store still
// listens for another client; a client whose schema watch stopped its claim loops leaves one the
// same way, which is how TestRunningClientStopsClaimingOnIncompatibleMigration met it.)
func TestStoppedClientsHandedJobKeepsRetryBudget(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		const maxAttempts = 2
		ctx := context.Background()
		w := newGivebackWorkers()
		// Another client of the store keeps its PostgreSQL listener up once c1 stops: without one,
		// the store stops listening and withdraws every advertisement at once.
		startClient(t, ts, &pronto.Config{Queues: map[string]pronto.QueueConfig{"refund-other": {MaxWorkers: 1}}, Workers: w.workers()})
		c1 := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 2}, nil)
		// The idle producer's claims advertise it; a warm-up job shows it works.
		warm := givebackInsert(t, c1, givebackArgs{Mode: "quick"}, nil)
		waitState(t, c1, warm.ID, pronto.StateCompleted)
		if ts.kind == kindPostgres {
			refundStretchAd(t, ts, func() {
				stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				require.NoError(t, c1.Stop(stopCtx))
			})
		} else {
			// On Redis the advertisement lapses 10 s after the producer's last claim.
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, c1.Stop(stopCtx))
		}

		// Inserted through the stopped client: the store, still open, hands it to the stale
		// advertisement. (After an insert that found nobody waiting, the warm-up job's maybe, the
		// next ones skip the hand-off for a moment: hence the retries.)
		var id string
		require.Eventually(t, func() bool {
			id = givebackInsert(t, c1, givebackArgs{Mode: "fail"}, &pronto.InsertOpts{MaxAttempts: maxAttempts}).ID
			if givebackGet(t, c1, id).State == pronto.StateActive {
				return true
			}
			// Not handed: deleted, as an available job ahead of the next would keep it from
			// being handed too.
			_, err := c1.JobDelete(ctx, id)
			require.NoError(t, err)
			return false
		}, 10*time.Second, 100*time.Millisecond, "no job was handed to the stopped client's advertisement")
		require.Eventually(t, func() bool { return givebackGet(t, c1, id).State == pronto.StateAvailable }, 30*time.Second, 5*time.Millisecond)
		j := givebackGet(t, c1, id)
		require.Zero(t, w.runs(id))
		require.Empty(t, j.Errors)
		require.Equal(t, maxAttempts, j.MaxAttempts-j.Attempt, "the handed, unserved job lost budget (attempt %d of %d)", j.Attempt, j.MaxAttempts)

		c2 := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 2}, refundRetryFast)
		j = waitState(t, c2, id, pronto.StateDiscarded)
		require.Equal(t, maxAttempts, w.runs(id), "the job ran %d times, its MaxAttempts at insert being %d", w.runs(id), maxAttempts)
		require.Len(t, j.Errors, maxAttempts)
	})
}

// refundStretchAd waits until the default queue's producer advertises free slots on PostgreSQL,
// runs stop, and then makes the advertisement last a minute: it lapses a few seconds after the
// producer's last claim, and a slow machine must still hand the next insert to it.
func refundStretchAd(t *testing.T, ts *testStore, stop func()) {
	t.Helper()
	ctx := context.Background()
	db := testdb.NewPool(t, 1)
	waiters, ours := `"`+ts.schema+`".waiters`, ` WHERE queue = 'default' AND free > 0`
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM `+waiters+ours).Scan(&n))
		return n > 0
	}, 15*time.Second, 5*time.Millisecond, "the producer never advertised free slots")
	stop()
	tag, err := db.Exec(ctx, `UPDATE `+waiters+` SET expires_at = now() + interval '1 minute'`+ours)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected(), "the advertisement did not outlive Stop")
}
