package finishbatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// claimed inserts n jobs into a memory store and claims them, returning their completions.
func claimed(t *testing.T, s store.Store, n int) []store.Completion {
	t.Helper()
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: []byte(`{}`),
			State: store.StateAvailable, MaxAttempts: 3}
	}
	_, err := s.Insert(context.Background(), ps)
	require.NoError(t, err)
	jobs, err := s.Claim(context.Background(), store.ClaimParams{Queue: "q", Limit: n, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	cs := make([]store.Completion, n)
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
	}
	return cs
}

// gated wraps a store's Finish: each write waits for the gate and records its size.
type gated struct {
	s     store.Store
	gate  chan struct{}
	mu    sync.Mutex
	sizes []int
	fail  error
}

func (g *gated) finish(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(cs))
	fail := g.fail
	g.mu.Unlock()
	<-g.gate
	if fail != nil && len(cs) > 1 {
		return nil, fail
	}
	return g.s.Finish(ctx, cs)
}

func (g *gated) writes() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sizes)
}

func waiting(b *Batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}

// TestConcurrentOutcomesShareWrites: outcomes handed over while writes are in flight go together in
// the next write, and each caller learns its own result: applied, or not for a stale claim.
func TestConcurrentOutcomesShareWrites(t *testing.T) {
	s := memory.New()
	cs := claimed(t, s, 10)
	cs[9].Token = "stale" // a claim that is not the job's: refused
	g := &gated{s: s, gate: make(chan struct{})}
	b := New(Config{Finish: g.finish, MaxFlights: 1})

	results := make([]bool, len(cs))
	var wg sync.WaitGroup
	wg.Go(func() { results[0], _ = b.Finish(context.Background(), cs[0]) })
	require.Eventually(t, func() bool { return g.writes() == 1 }, 10*time.Second, time.Millisecond)
	for i := 1; i < len(cs); i++ {
		wg.Go(func() {
			var err error
			results[i], err = b.Finish(context.Background(), cs[i])
			require.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool { return waiting(b) == len(cs)-1 }, 10*time.Second, time.Millisecond)
	close(g.gate)
	wg.Wait()
	require.Equal(t, []int{1, len(cs) - 1}, g.sizes, "the outcomes that gathered went in one write")
	for i := range 9 {
		require.True(t, results[i], "outcome %d applied", i)
		j, err := s.GetJob(context.Background(), cs[i].ID)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, j.State)
	}
	require.False(t, results[9], "the stale claim's outcome is refused, and its caller told so")
}

// TestTwoOutcomesOfOneJobNeverShareAWrite: of two outcomes of one job, exactly one is reported
// applied, as written alone.
func TestTwoOutcomesOfOneJobNeverShareAWrite(t *testing.T) {
	s := memory.New()
	cs := claimed(t, s, 2)
	g := &gated{s: s, gate: make(chan struct{})}
	b := New(Config{Finish: g.finish, MaxFlights: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Finish(context.Background(), cs[1]) })
	require.Eventually(t, func() bool { return g.writes() == 1 }, 10*time.Second, time.Millisecond)
	nack := cs[0]
	nack.State = store.StateRetryable
	res := make([]bool, 2)
	wg.Go(func() { res[0], _ = b.Finish(context.Background(), cs[0]) })
	require.Eventually(t, func() bool { return waiting(b) == 1 }, 10*time.Second, time.Millisecond)
	wg.Go(func() { res[1], _ = b.Finish(context.Background(), nack) })
	require.Eventually(t, func() bool { return waiting(b) == 2 }, 10*time.Second, time.Millisecond)
	close(g.gate)
	wg.Wait()
	require.Equal(t, []int{1, 1, 1}, g.sizes, "the two outcomes of one job went in separate writes")
	require.Equal(t, []bool{true, false}, res, "the first is applied, the second refused")
	j, err := s.GetJob(context.Background(), cs[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, j.State)
}

// TestFailedBatchIsRetriedOneByOne: a write the store fails as a whole is written again outcome by
// outcome, so each caller gets its own answer.
func TestFailedBatchIsRetriedOneByOne(t *testing.T) {
	s := memory.New()
	cs := claimed(t, s, 4)
	g := &gated{s: s, gate: make(chan struct{}), fail: errors.New("batch refused")}
	b := New(Config{Finish: g.finish, MaxFlights: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Finish(context.Background(), cs[0]) })
	require.Eventually(t, func() bool { return g.writes() == 1 }, 10*time.Second, time.Millisecond)
	for i := 1; i < 4; i++ {
		wg.Go(func() {
			ok, err := b.Finish(context.Background(), cs[i])
			require.NoError(t, err)
			require.True(t, ok)
		})
	}
	require.Eventually(t, func() bool { return waiting(b) == 3 }, 10*time.Second, time.Millisecond)
	close(g.gate)
	wg.Wait()
	require.Equal(t, []int{1, 3, 1, 1, 1}, g.sizes)
}

// TestLeftBeforeWriteIsDropped: an outcome whose caller left before a write took it is not written.
func TestLeftBeforeWriteIsDropped(t *testing.T) {
	s := memory.New()
	cs := claimed(t, s, 2)
	g := &gated{s: s, gate: make(chan struct{})}
	b := New(Config{Finish: g.finish, MaxFlights: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Finish(context.Background(), cs[0]) })
	require.Eventually(t, func() bool { return g.writes() == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := b.Finish(ctx, cs[1])
		left <- err
	}()
	require.Eventually(t, func() bool { return waiting(b) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	close(g.gate)
	wg.Wait()
	require.Equal(t, []int{1}, g.sizes, "no write for the outcome whose caller left")
	j, err := s.GetJob(context.Background(), cs[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, j.State)
}
