package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// A client halted by incompatible migrations claims nothing more, so it says goodbye as Stop does:
// the other clients working its queues stop leaving to it the jobs whose notification picks it as
// their claimer, at once rather than when its presence expires (minutes here). Before, it went
// silent and was counted as a peer for the presence TTL, its share of the new jobs waiting for the
// others' polls.
func TestHaltedClientSaysGoodbye(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t, kindPostgres)
	start := func(every time.Duration) *pronto.Client {
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[schemaWatchArgs]) error { return nil }))
		c, err := pronto.NewClient(ts.reopen(t), fastConfig(workers, defaultQueue(1)))
		require.NoError(t, err)
		// One announcement each, at start, counted for 35 minutes.
		pronto.SetPresenceInterval(c, 10*time.Minute)
		pronto.SetSchemaWatchEvery(c, every)
		startBuilt(t, c)
		return c
	}
	// The halting client starts second, so that its one announcement reaches the other.
	other := start(time.Hour) // a newer binary's client, in effect: it does not halt
	halting := start(20 * time.Millisecond)
	require.Eventually(t, func() bool { return pronto.PresencePeers(other, pronto.DefaultQueue) == 1 },
		10*time.Second, 10*time.Millisecond, "the clients never saw each other")

	recordNewerMigration(t, ts, "future_incompatible", false)
	require.Eventually(t, func() bool { return halting.SchemaIncompatible() != nil }, 15*time.Second, 5*time.Millisecond,
		"the client did not notice the incompatible migration")
	require.Eventually(t, func() bool { return pronto.PresencePeers(other, pronto.DefaultQueue) == 0 },
		10*time.Second, 10*time.Millisecond, "the other client still counts the halted one as a claimer")
	require.Nil(t, other.SchemaIncompatible())
}
