package pronto

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestRateLimitEpisodeEventsInOrder: claims that change the same key's episode at once (one finds
// the key limited, another starts its last waiting job) deliver its events in the order they
// changed it: for each key, exceeded and released alternate, exceeded first, never released before
// the exceeded that opened its episode.
func TestRateLimitEpisodeEventsInOrder(t *testing.T) {
	c, err := NewClient(memory.New(), nil)
	require.NoError(t, err)
	events, unsubscribe := c.Subscribe(EventRateLimitExceeded, EventRateLimitReleased)
	defer unsubscribe()

	const goroutines, rounds = 4, 100 // at most 400 events: within the subscription's buffer
	hit := []store.LimitHit{{Key: "K", Strategy: store.LimitConcurrency, Limit: 1, Current: 1}}
	job := []*store.Job{{ID: "j", RateKey: "K"}}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if (g+i)%2 == 0 {
					c.observeLimits(hit, nil)
				} else {
					c.observeLimits(nil, job)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, c.DroppedEvents())

	want := EventRateLimitExceeded
	for n := 0; ; n++ {
		select {
		case ev := <-events:
			require.Equal(t, want, ev.Kind, "event %d", n)
			if want == EventRateLimitExceeded {
				want = EventRateLimitReleased
			} else {
				want = EventRateLimitExceeded
			}
		default:
			return
		}
	}
}
