package pronto_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// slowClaims is a store whose claims take a while (as over a network), recording each claim's
// limit.
type slowClaims struct {
	store.Store
	mu     sync.Mutex
	limits []int
}

func (s *slowClaims) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	s.mu.Lock()
	s.limits = append(s.limits, p.Limit)
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	return s.Store.Claim(ctx, p)
}

func (s *slowClaims) seen() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.limits...)
}

// drainCounting inserts n jobs (of tenant, "" for none) into a store whose claims are slow, drains
// them with a client of 2 workers and the given Prefetch, and returns the claims' limits; every
// job must run exactly once.
func drainCounting(t *testing.T, n, prefetch int, tenant string) []int {
	t.Helper()
	ctx := context.Background()
	st := &slowClaims{Store: memory.New()}
	inserter, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	ps := make([]pronto.InsertManyParams, n)
	var opts *pronto.InsertOpts
	if tenant != "" {
		opts = &pronto.InsertOpts{Tenant: tenant}
	}
	for i := range ps {
		ps[i] = pronto.InsertManyParams{Args: echoArgs{Message: fmt.Sprint(i)}, Opts: opts}
	}
	_, err = inserter.InsertMany(ctx, ps)
	require.NoError(t, err)

	var mu sync.Mutex
	runs := map[string]int{}
	done := make(chan struct{})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[echoArgs]) error {
		mu.Lock()
		runs[j.Args.Message]++
		if len(runs) == n {
			close(done)
		}
		mu.Unlock()
		return nil
	}))
	cfg := fastConfig(workers, map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 2, Prefetch: prefetch}})
	startClient(t, st, cfg)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the backlog was not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	for msg, k := range runs {
		require.Equal(t, 1, k, "job %s ran once", msg)
	}
	return st.seen()
}

// TestAutoPrefetchThroughABacklogOfShortJobs: at the default Prefetch, a client whose jobs are far
// shorter than its claims claims beyond its free workers while a backlog lasts, within
// AutoPrefetchMax; with NoPrefetch it never does.
func TestAutoPrefetchThroughABacklogOfShortJobs(t *testing.T) {
	t.Parallel()
	limits := drainCounting(t, 400, 0, "")
	require.Equal(t, 2, limits[0], "the first claim: the free workers (nothing measured yet)")
	most := 0
	for _, l := range limits {
		require.LessOrEqual(t, l, 2+pronto.AutoPrefetchMax(2))
		most = max(most, l)
	}
	require.Greater(t, most, 2, "claimed ahead of the workers: %v", limits)

	for _, l := range drainCounting(t, 100, pronto.NoPrefetch, "") {
		require.LessOrEqual(t, l, 2, "NoPrefetch: claims for the free workers only")
	}
}

// TestAutoPrefetchHoldsNothingAheadOfTenantTurns: a backlog of jobs of tenants is claimed for the
// free workers only at the default Prefetch: a job held ahead would wait for its tenant's turn
// behind jobs already claimed for others.
func TestAutoPrefetchHoldsNothingAheadOfTenantTurns(t *testing.T) {
	t.Parallel()
	for _, l := range drainCounting(t, 200, 0, "acme") {
		require.LessOrEqual(t, l, 2, "claims of tenants' jobs: the free workers only")
	}
}

// TestPrefetchedJobsRunInTenantTurns: jobs held ahead of the workers start in turns across tenants,
// not in claim order: a tenant's job claimed after several of another tenant's held jobs runs next.
func TestPrefetchedJobsRunInTenantTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memory.New()
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[echoArgs]) error {
		if j.Args.Message == "a1" {
			<-gate
		}
		mu.Lock()
		order = append(order, j.Args.Message)
		mu.Unlock()
		return nil
	}))
	// a1 holds the only worker until the gate opens: a lease that a loaded machine's stall cannot
	// lapse, or the rescue would run a1 again and change the order this test reads.
	cfg := heldConfig(workers, map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 1, Prefetch: 10}})
	c := startClient(t, st, cfg)
	insert := func(msg, tenant string) {
		_, err := c.Insert(ctx, echoArgs{Message: msg}, &pronto.InsertOpts{Tenant: tenant})
		require.NoError(t, err)
	}
	insert("a1", "a")
	require.Eventually(t, func() bool { return c.Stats().Queues[pronto.DefaultQueue].Running == 1 }, 10*time.Second, time.Millisecond)
	for _, m := range []string{"a2", "a3", "a4"} {
		insert(m, "a")
	}
	require.Eventually(t, func() bool { return c.Stats().Queues[pronto.DefaultQueue].Prefetched == 3 }, 10*time.Second, time.Millisecond)
	insert("b1", "b")
	require.Eventually(t, func() bool { return c.Stats().Queues[pronto.DefaultQueue].Prefetched == 4 }, 10*time.Second, time.Millisecond)
	close(gate)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 5 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"a1", "b1", "a2", "a3", "a4"}, order, "b1 takes the turn after a's")
}
