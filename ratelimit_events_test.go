package pronto_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type rateEpisodeArgs struct{ N int }

func (rateEpisodeArgs) Kind() string { return "rate.episode" }

// TestRateLimitEpisodeEvents: a backlog behind a rate key worked by the client's own workers gives
// one EventRateLimitExceeded when the key fills up and one EventRateLimitReleased, with the job that
// started, when the backlog no longer fills it: not an event per job held back, nor per claim.
func TestRateLimitEpisodeEvents(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		const n = 40
		var done atomic.Int32
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[rateEpisodeArgs]) error {
			time.Sleep(3 * time.Millisecond)
			done.Add(1)
			return nil
		}))
		c, err := pronto.NewClient(ts.Store, fastConfig(ws, defaultQueue(10)))
		require.NoError(t, err)
		require.NoError(t, c.RateLimitSet(ctx, "episode-api", pronto.RateLimit{MaxActive: 2}))
		for i := range n {
			_, err := c.Insert(ctx, rateEpisodeArgs{N: i}, &pronto.InsertOpts{RateKey: "episode-api"})
			require.NoError(t, err)
		}
		events, unsubscribe := c.Subscribe(pronto.EventRateLimitExceeded, pronto.EventRateLimitReleased)
		defer unsubscribe()
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() {
			stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Stop(stop)
		})
		require.Eventually(t, func() bool { return done.Load() == n }, 20*time.Second, 10*time.Millisecond)

		var got []*pronto.Event
		for len(got) < 2 {
			select {
			case ev := <-events:
				got = append(got, ev)
			case <-time.After(5 * time.Second):
				t.Fatalf("got %d rate-limit events, want 2", len(got))
			}
		}
		select {
		case ev := <-events:
			t.Fatalf("one episode, two events: got a third, %s %+v", ev.Kind, ev.Limit)
		case <-time.After(100 * time.Millisecond):
		}
		ex, rel := got[0], got[1]
		require.Equal(t, pronto.EventRateLimitExceeded, ex.Kind)
		require.Nil(t, ex.Job)
		require.Equal(t, pronto.LimitHit{Key: "episode-api", Strategy: pronto.LimitConcurrency, Limit: 2, Current: 2}, *ex.Limit)
		require.Equal(t, pronto.EventRateLimitReleased, rel.Kind)
		require.NotNil(t, rel.Job)
		require.Equal(t, "episode-api", rel.Job.RateKey)
		require.Equal(t, "episode-api", rel.Limit.Key)
		require.Equal(t, pronto.StateActive, rel.Job.State, "the job that started")
	})
}
