package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// handoffKeysLeft returns the hand-off keys of queue that are still in Redis: the set of
// advertisements, and any waiter's claim arguments, inbox or got list.
func handoffKeysLeft(t *testing.T, s *Store, queue string) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	b := s.qkey(queue)
	iter := s.rdb.Scan(ctx, 0, b+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := strings.TrimPrefix(iter.Val(), b)
		if k == "wait" || strings.HasPrefix(k, "w:") || strings.HasPrefix(k, "in:") || strings.HasPrefix(k, "got:") {
			left = append(left, k)
		}
	}
	require.NoError(t, iter.Err())
	return left
}

// TestHandoffDeadWaiterLeavesNoKeys: a process dies (here: its waiter freezes for good, and the
// store is never closed while it matters) just after its pop moved a handed job onto its got list,
// with an advertisement of its producer written after. Its hand-off keys are gone within a bounded
// time: the got list expires gotTTL (shortened here) after the waiter last renewed it, the set of
// advertisements once the advertisement has lapsed. The job itself is rescued at lease end, as any
// job of a dead process. Before, the got list and the set had no expiry and stayed in Redis for good.
func TestHandoffDeadWaiterLeavesNoKeys(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.gotTTL = 2 * time.Second // before its first waiter starts
	const queue = "lo-dead"
	p := loopClaim(queue)
	_, err := a.Claim(loop, p)
	require.NoError(t, err)

	frozen := make(chan struct{})
	release := make(chan struct{})
	onStep(t, a, func(_ *waiter, step string) {
		if step == "popped" {
			close(frozen)
			<-release // dead: nothing after the pop runs until the test ends
		}
	})
	// Runs before the store's Close (cleanups run last first), which waits for the waiter.
	t.Cleanup(func() { close(release) })

	in := testJob(queue)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	select {
	case <-frozen:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing handed")
	}
	// The producer advertises once more before the process dies; no claim or insert follows.
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.NotEmpty(t, handoffKeysLeft(t, a, queue))

	// The advertisement lapses adTTL after it was written; the got list gotTTL after its renewal.
	deadline := time.Now().Add(adTTL + 30*time.Second)
	for {
		left := handoffKeysLeft(t, a, queue)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left by the dead waiter: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "the handed job waits for the rescue")
}
