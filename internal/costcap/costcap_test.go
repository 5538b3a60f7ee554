package costcap

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// counter is a Read that returns how many times it was called and takes cost on the clock.
type counter struct {
	c     *clock
	cost  atomic.Int64 // time.Duration
	calls atomic.Int64
}

func (n *counter) read(context.Context) (int64, error) {
	n.c.advance(time.Duration(n.cost.Load()))
	return n.calls.Add(1), nil
}

func TestCheapReadsAreNeverReused(t *testing.T) {
	c := newClock()
	n := &counter{c: c}
	n.cost.Store(int64(DefaultThreshold - time.Millisecond))
	r := &Reader[int64]{Read: n.read, Now: c.Now}
	for i := int64(1); i <= 3; i++ {
		v, err := r.Get(context.Background())
		require.NoError(t, err)
		require.Equal(t, i, v, "every call reads afresh")
	}
}

func TestCostlyIsTheCallersTest(t *testing.T) {
	c := newClock()
	n := &counter{c: c}
	n.cost.Store(int64(time.Second))
	r := &Reader[int64]{Read: n.read, Now: c.Now, Costly: func(v int64, took time.Duration) bool {
		require.Equal(t, time.Second, took)
		return v >= 2 // a large enough result
	}}
	ctx := context.Background()
	for i := int64(1); i <= 2; i++ {
		v, err := r.Get(ctx)
		require.NoError(t, err)
		require.Equal(t, i, v, "slow, but small: read afresh")
	}
	v, err := r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), v, "slow and large: reused")
}

func TestCostlyReadIsReusedInProportionToItsCost(t *testing.T) {
	c := newClock()
	n := &counter{c: c}
	n.cost.Store(int64(100 * time.Millisecond))
	r := &Reader[int64]{Read: n.read, Now: c.Now}
	ctx := context.Background()

	v, err := r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
	c.advance(1900 * time.Millisecond) // within 20 x 100 ms of the read's end
	v, err = r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), v, "reused")
	c.advance(100 * time.Millisecond) // 2 s after: no longer
	v, err = r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), v)

	// Once reads are cheap again, nothing is reused.
	n.cost.Store(int64(time.Millisecond))
	c.advance(2 * time.Second)
	v, err = r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), v)
	v, err = r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), v)
}

func TestReuseIsBoundedByMax(t *testing.T) {
	c := newClock()
	n := &counter{c: c}
	n.cost.Store(int64(10 * time.Second)) // 20x would be 200 s
	r := &Reader[int64]{Read: n.read, Now: c.Now}
	ctx := context.Background()
	_, err := r.Get(ctx)
	require.NoError(t, err)
	c.advance(DefaultMax - time.Second)
	v, err := r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
	c.advance(time.Second)
	v, err = r.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), v)
}

func TestErrorsAreNotReused(t *testing.T) {
	c := newClock()
	boom := errors.New("boom")
	var calls int
	r := &Reader[int]{Now: c.Now, Read: func(context.Context) (int, error) {
		calls++
		c.advance(time.Second)
		if calls == 1 {
			return 0, boom
		}
		return calls, nil
	}}
	_, err := r.Get(context.Background())
	require.ErrorIs(t, err, boom)
	v, err := r.Get(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, v)
}

func TestCallersGetCopies(t *testing.T) {
	c := newClock()
	r := &Reader[map[string]int]{Now: c.Now,
		Read: func(context.Context) (map[string]int, error) {
			c.advance(time.Second)
			return map[string]int{"a": 1}, nil
		},
		Clone: func(m map[string]int) map[string]int {
			out := make(map[string]int, len(m))
			for k, v := range m {
				out[k] = v
			}
			return out
		}}
	a, err := r.Get(context.Background())
	require.NoError(t, err)
	a["a"] = 99
	b, err := r.Get(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, b["a"], "a caller's change does not reach the reused result")
}

// gated is a Read that blocks until released, taking cost on the clock.
type gated struct {
	c       *clock
	cost    time.Duration
	started chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func newGated(c *clock, cost time.Duration) *gated {
	return &gated{c: c, cost: cost, started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gated) read(ctx context.Context) (int64, error) {
	n := g.calls.Add(1)
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	g.c.advance(g.cost)
	return n, nil
}

func TestCostlyReadsAreShared(t *testing.T) {
	c := newClock()
	g := newGated(c, time.Second)
	var nows atomic.Int64
	r := &Reader[int64]{Read: g.read, Now: func() time.Time { nows.Add(1); return c.Now() }}
	ctx := context.Background()
	// A first costly read, then past its reuse.
	close(g.release)
	_, err := r.Get(ctx)
	require.NoError(t, err)
	<-g.started
	c.advance(time.Hour)
	g.release = make(chan struct{})

	results := make(chan int64, 2)
	go func() {
		v, err := r.Get(ctx)
		require.NoError(t, err)
		results <- v
	}()
	<-g.started // the first caller's read is in flight
	entered := nows.Load()
	go func() {
		v, err := r.Get(ctx)
		require.NoError(t, err)
		results <- v
	}()
	// The second caller is in Get (it reads the clock first) while the read is in flight: it waits
	// for that read rather than starting its own, which would count a third call.
	for nows.Load() == entered {
		time.Sleep(time.Millisecond)
	}
	close(g.release)
	require.Equal(t, int64(2), <-results)
	require.Equal(t, int64(2), <-results)
	require.Equal(t, int64(2), g.calls.Load())
}

func TestCheapReadsAreNotShared(t *testing.T) {
	c := newClock()
	g := newGated(c, time.Millisecond)
	r := &Reader[int64]{Read: g.read, Now: c.Now}
	ctx := context.Background()
	results := make(chan int64, 2)
	for range 2 {
		go func() {
			v, err := r.Get(ctx)
			require.NoError(t, err)
			results <- v
		}()
	}
	// Both callers read for themselves (each read's start is seen), so each sees what was written
	// before its call.
	<-g.started
	<-g.started
	close(g.release)
	a, b := <-results, <-results
	require.ElementsMatch(t, []int64{1, 2}, []int64{a, b})
}

func TestWaiterGivesUpWithItsContext(t *testing.T) {
	c := newClock()
	g := newGated(c, time.Second)
	r := &Reader[int64]{Read: g.read, Now: c.Now}
	close(g.release)
	_, err := r.Get(context.Background())
	require.NoError(t, err)
	<-g.started
	c.advance(time.Hour)
	g.release = make(chan struct{})

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Get(context.Background())
	}()
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Get(ctx)
	require.ErrorIs(t, err, context.Canceled)
	close(g.release)
	<-done
	require.Equal(t, int64(2), g.calls.Load(), "the caller that gave up never read")
}
