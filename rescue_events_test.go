package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestRescueEvents: the leader tells its subscribers about the jobs it takes back from a worker that
// stopped heartbeating. A job with attempts left is announced as rescued; one whose lost run was its
// last attempt is discarded with an error that is ErrJobLost, so a subscriber can tell a lost lease
// from a worker's own failure (the demo counts them that way).
func TestRescueEvents(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		inserter, err := pronto.NewClient(ts, nil)
		require.NoError(t, err)
		again, err := inserter.Insert(ctx, echoArgs{N: 1}, &pronto.InsertOpts{Queue: "orphans", MaxAttempts: 3})
		require.NoError(t, err)
		last, err := inserter.Insert(ctx, echoArgs{N: 2}, &pronto.InsertOpts{Queue: "orphans", MaxAttempts: 1})
		require.NoError(t, err)
		// A worker claims both and vanishes.
		claimed, err := ts.Claim(ctx, store.ClaimParams{Queue: "orphans", Limit: 2, WorkerID: "vanished", LeaseDuration: 200 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, claimed, 2)

		// The leader serves another queue: nothing runs the rescued job, only the rescue is seen.
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[echoArgs]) error { return nil }))
		leader, err := pronto.NewClient(ts, fastConfig(workers, defaultQueue(1)))
		require.NoError(t, err)
		events, unsubscribe := leader.Subscribe(pronto.EventRescued, pronto.EventDiscarded)
		defer unsubscribe()
		require.NoError(t, leader.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = leader.Stop(stopCtx)
		})

		seen := map[string]*pronto.Event{}
		timeout := time.After(30 * time.Second)
		for len(seen) < 2 {
			select {
			case e := <-events:
				require.NotContains(t, seen, e.Job.ID, "one event per rescued job")
				seen[e.Job.ID] = e
			case <-timeout:
				t.Fatalf("rescue events seen: %v", seen)
			}
		}
		require.Equal(t, pronto.EventRescued, seen[again.ID].Kind)
		require.Equal(t, pronto.StateAvailable, seen[again.ID].Job.State)
		require.Equal(t, pronto.EventDiscarded, seen[last.ID].Kind)
		require.True(t, errors.Is(seen[last.ID].Err, pronto.ErrJobLost), "discarded by the rescuer: %v", seen[last.ID].Err)
		require.Equal(t, pronto.StateDiscarded, waitState(t, leader, last.ID, pronto.StateDiscarded).State)
	})
}

// TestExpiredJobEvents: a job whose ExpiresAt passes before it starts is discarded with one
// EventDiscarded whose error is ErrJobExpired, by the leader's pass, and by JobCatchUp on a client
// that does not lead, which reports it as the leader would.
func TestExpiredJobEvents(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		// waitExpired waits for the one event of job id on events, and makes sure no second follows.
		waitExpired := func(t *testing.T, events <-chan *pronto.Event, id string) {
			t.Helper()
			var got []*pronto.Event
			timeout := time.After(15 * time.Second)
			for len(got) == 0 {
				select {
				case e := <-events:
					if e.Job.ID == id {
						got = append(got, e)
					}
				case <-timeout:
					t.Fatal("no event for the expired job")
				}
			}
			quiet := time.After(1500 * time.Millisecond) // past a leader's pass
			for done := false; !done; {
				select {
				case e := <-events:
					if e.Job.ID == id {
						got = append(got, e)
					}
				case <-quiet:
					done = true
				}
			}
			require.Len(t, got, 1, "one event per expired job")
			e := got[0]
			require.Equal(t, pronto.EventDiscarded, e.Kind)
			require.ErrorIs(t, e.Err, pronto.ErrJobExpired)
			require.Equal(t, pronto.StateDiscarded, e.Job.State)
			require.Equal(t, 0, e.Job.Attempt, "it never ran")
		}

		t.Run("by the leader", func(t *testing.T) {
			leader := startClient(t, ts, fastConfig(nil, nil))
			events, unsubscribe := leader.Subscribe(pronto.EventDiscarded)
			defer unsubscribe()
			row, err := leader.Insert(ctx, echoArgs{N: 1}, &pronto.InsertOpts{Queue: "expiring", ExpiresAt: time.Now().Add(100 * time.Millisecond)})
			require.NoError(t, err)
			waitExpired(t, events, row.ID)
		})

		t.Run("by JobCatchUp", func(t *testing.T) {
			c, err := pronto.NewClient(ts, &pronto.Config{DisableMaintenance: true})
			require.NoError(t, err)
			events, unsubscribe := c.Subscribe(pronto.EventDiscarded)
			defer unsubscribe()
			row, err := c.Insert(ctx, echoArgs{N: 2}, &pronto.InsertOpts{Queue: "expiring-catchup", ExpiresAt: time.Now().Add(50 * time.Millisecond)})
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			j, err := c.JobGet(ctx, row.ID)
			require.NoError(t, err)
			require.Equal(t, pronto.StateAvailable, j.State, "no leader discarded it")
			j, err = c.JobCatchUp(ctx, j)
			require.NoError(t, err)
			require.Equal(t, pronto.StateDiscarded, j.State)
			waitExpired(t, events, row.ID)
		})
	})
}
