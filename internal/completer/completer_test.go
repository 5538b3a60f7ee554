package completer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func TestBatchesAndReportsEveryOutcome(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	release := make(chan struct{})
	first := true
	c := New(Config{MaxBatchSize: 50, Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		batches = append(batches, len(cs))
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-release // hold the first batch so the rest gather
		}
		out := make([]store.FinishResult, len(cs))
		for i, c := range cs {
			out[i] = store.FinishResult{ID: c.ID, Applied: c.ID != "stale"}
		}
		return out, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)

	var applied, notApplied atomic.Int32
	done := func(ok bool, err error) {
		require.NoError(t, err)
		if ok {
			applied.Add(1)
		} else {
			notApplied.Add(1)
		}
	}
	c.Add(Item{Completion: store.Completion{ID: "first"}, Done: done})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 }, 5*time.Second, time.Millisecond)
	for i := 0; i < 120; i++ {
		c.Add(Item{Completion: store.Completion{ID: fmt.Sprint(i)}, Done: done})
	}
	c.Add(Item{Completion: store.Completion{ID: "stale"}, Done: done})
	close(release)
	c.Close()
	<-c.Done()
	require.EqualValues(t, 121, applied.Load())
	require.EqualValues(t, 1, notApplied.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 50, 50, 21}, batches, "outcomes gathered while a batch was written go out together, bounded by MaxBatchSize")
}

func TestRetriesWhileTheStoreFails(t *testing.T) {
	var calls atomic.Int32
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		if calls.Add(1) < 3 {
			return nil, errors.New("database is down")
		}
		return []store.FinishResult{{ID: cs[0].ID, Applied: true}}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	got := make(chan bool, 1)
	c.Add(Item{Completion: store.Completion{ID: "a"}, Done: func(ok bool, err error) { got <- ok && err == nil }})
	select {
	case ok := <-got:
		require.True(t, ok, "the outcome is written once the store is back")
	case <-time.After(10 * time.Second):
		t.Fatal("outcome never written")
	}
	require.EqualValues(t, 3, calls.Load())
	c.Close()
	<-c.Done()
}

func TestCancelledContextReportsWhatIsLeft(t *testing.T) {
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	errs := make(chan error, 2)
	c.Add(Item{Completion: store.Completion{ID: "a"}, Done: func(_ bool, err error) { errs <- err }})
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.Error(t, <-errs)
	<-c.Done()
	c.Add(Item{Completion: store.Completion{ID: "b"}, Done: func(_ bool, err error) { errs <- err }})
	require.Error(t, <-errs, "after the completer stopped, Add reports at once that nothing was written")
}
