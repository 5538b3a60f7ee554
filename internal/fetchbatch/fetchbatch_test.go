package fetchbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// fill inserts n available jobs into queue.
func fill(t *testing.T, s store.Store, queue string, n int) {
	t.Helper()
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: queue, Args: []byte(`{}`),
			State: store.StateAvailable, MaxAttempts: 3}
	}
	_, err := s.Insert(context.Background(), ps)
	require.NoError(t, err)
}

// gatedClaims wraps a store's Claim: every claim blocks until the test opens the gate, so that the
// fetches the test starts meanwhile gather behind the claims in flight.
type gatedClaims struct {
	s     store.Store
	gate  chan struct{}
	mu    sync.Mutex
	sizes []int // slots asked for by each claim, in order
}

func (g *gatedClaims) claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(p.WorkerIDs))
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.s.Claim(ctx, p)
}

// waitingIn reports how many fetches wait in the group of queue.
func waitingIn(b *Batcher, queue string, lease time.Duration) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.groups[groupKey{queue, lease}]; g != nil {
		return len(g.waiting)
	}
	return 0
}

func TestLoneFetchClaimsAtOnce(t *testing.T) {
	s := memory.New()
	fill(t, s, "q", 3)
	b := New(Config{Claim: s.Claim, Release: func(ctx context.Context, jobs []*store.Job) { store.ReleaseClaimed(ctx, s, jobs) }})
	jobs, err := b.Claim(t.Context(), "q", "w1", 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	for _, j := range jobs {
		require.Equal(t, "w1", j.WorkerID)
		stored, err := s.GetJob(t.Context(), j.ID)
		require.NoError(t, err)
		require.Equal(t, "w1", stored.WorkerID)
		require.Equal(t, store.StateActive, stored.State)
	}
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.groups) == 0 },
		10*time.Second, time.Millisecond, "a group with nothing waiting and nothing in flight is dropped")
}

// TestConcurrentFetchesShareClaims: fetches that arrive while claims are in flight share the next
// claim, each gets at most what it asked for under its own worker id, and no job goes to two.
func TestConcurrentFetchesShareClaims(t *testing.T) {
	s := memory.New()
	const jobs, fetchers = 30, 40
	fill(t, s, "q", jobs)
	g := &gatedClaims{s: s, gate: make(chan struct{})}
	b := New(Config{Claim: g.claim, MaxFlights: 2})

	var wg sync.WaitGroup
	got := make([][]*store.Job, fetchers)
	errs := make([]error, fetchers)
	for i := range fetchers {
		wg.Go(func() {
			got[i], errs[i] = b.Claim(context.Background(), "q", fmt.Sprintf("w%d", i), 1, time.Minute)
		})
	}
	// Two claims are in flight, both blocked at the gate (each has asked for its size); the other
	// fetches gather.
	require.Eventually(t, func() bool {
		g.mu.Lock()
		asked := len(g.sizes)
		g.mu.Unlock()
		return asked == 2 && waitingIn(b, "q", time.Minute) == fetchers-2
	}, 10*time.Second, time.Millisecond)
	close(g.gate)
	wg.Wait()

	seen := map[string]bool{}
	total := 0
	for i := range fetchers {
		require.NoError(t, errs[i])
		require.LessOrEqual(t, len(got[i]), 1)
		for _, j := range got[i] {
			require.Equal(t, fmt.Sprintf("w%d", i), j.WorkerID, "a job goes to the worker it was claimed for")
			require.False(t, seen[j.ID], "job %s handed out twice", j.ID)
			seen[j.ID] = true
			total++
		}
	}
	require.Equal(t, jobs, total, "every job is handed out")
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, []int{1, 1, fetchers - 2}, g.sizes, "two lone claims, then one claim for everyone who gathered")
}

// TestAbandonedFetchReleasesItsJobs: a caller that stops waiting while its claim is in flight gets
// nothing, and the job claimed for it goes back to available with its attempt refunded.
func TestAbandonedFetchReleasesItsJobs(t *testing.T) {
	s := memory.New()
	fill(t, s, "q", 2)
	g := &gatedClaims{s: s, gate: make(chan struct{})}
	b := New(Config{Claim: g.claim, MaxFlights: 1,
		Release: func(ctx context.Context, jobs []*store.Job) { store.ReleaseClaimed(ctx, s, jobs) }})

	leaver, leave := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := b.Claim(leaver, "q", "leaver", 1, time.Minute)
		first <- err
	}()
	stayer := make(chan []*store.Job, 1)
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.sizes) == 1 },
		10*time.Second, time.Millisecond)
	go func() {
		jobs, _ := b.Claim(context.Background(), "q", "stayer", 1, time.Minute)
		stayer <- jobs
	}()
	require.Eventually(t, func() bool { return waitingIn(b, "q", time.Minute) == 1 }, 10*time.Second, time.Millisecond)
	// The leaver's claim is in flight alone; the stayer waits for the next. The leaver leaves.
	leave()
	require.ErrorIs(t, <-first, context.Canceled)
	close(g.gate)
	mine := <-stayer
	require.Len(t, mine, 1)
	require.Equal(t, "stayer", mine[0].WorkerID)

	// The leaver's flight was cancelled with its only caller: nothing stayed claimed for it.
	list, _, err := s.ListJobs(context.Background(), store.ListParams{Queues: []string{"q"}, States: []store.State{store.StateActive}})
	require.NoError(t, err)
	require.Len(t, list, 1, "only the stayer's job is active")
	require.Equal(t, "stayer", list[0].WorkerID)
}

// TestTakenThenAbandonedIsReleased: a claim that completes for a caller who left meanwhile gives
// its job back at once.
func TestTakenThenAbandonedIsReleased(t *testing.T) {
	s := memory.New()
	fill(t, s, "q", 2)
	g := &gatedClaims{s: s, gate: make(chan struct{})}
	released := make(chan []*store.Job, 1)
	b := New(Config{Claim: g.claim, MaxFlights: 1, Release: func(ctx context.Context, jobs []*store.Job) {
		store.ReleaseClaimed(ctx, s, jobs)
		released <- jobs
	}})
	// Two callers in one claim: the first blocks the flight, the second and third gather.
	go func() { _, _ = b.Claim(context.Background(), "q", "w0", 1, time.Minute) }()
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.sizes) == 1 },
		10*time.Second, time.Millisecond)
	leaver, leave := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := b.Claim(leaver, "q", "leaver", 1, time.Minute)
		left <- err
	}()
	require.Eventually(t, func() bool { return waitingIn(b, "q", time.Minute) == 1 }, 10*time.Second, time.Millisecond)
	stayed := make(chan []*store.Job, 1)
	go func() {
		jobs, _ := b.Claim(context.Background(), "q", "stayer", 1, time.Minute)
		stayed <- jobs
	}()
	require.Eventually(t, func() bool { return waitingIn(b, "q", time.Minute) == 2 }, 10*time.Second, time.Millisecond)
	g.gate <- struct{}{} // the first claim proceeds; the second (leaver and stayer) starts and blocks
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.sizes) == 2 },
		10*time.Second, time.Millisecond)
	leave()
	require.ErrorIs(t, <-left, context.Canceled)
	close(g.gate) // the second claim runs for the stayer, whose flight is still live
	// Two jobs, three callers: w0 took one; the second claim took the other for the first of its
	// callers, the leaver (the store gives a claim's first entry to its first job).
	require.Empty(t, <-stayed, "the queue ran out before the stayer's slot")
	back := <-released
	require.Len(t, back, 1)
	require.Equal(t, "leaver", back[0].WorkerID)
	for _, j := range back {
		stored, err := s.GetJob(context.Background(), j.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateAvailable, stored.State, "a job claimed for a caller who left is released")
		require.Equal(t, 4, stored.MaxAttempts, "its attempt is refunded")
	}
}

func TestClaimErrorReachesEveryCaller(t *testing.T) {
	boom := errors.New("database down")
	b := New(Config{Claim: func(context.Context, store.ClaimParams) ([]*store.Job, error) { return nil, boom }})
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			_, err := b.Claim(context.Background(), "q", fmt.Sprint(i), 1, time.Minute)
			require.ErrorIs(t, err, boom)
		})
	}
	wg.Wait()
}
