package producer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestAutoPrefetchSizing: the jobs held beyond the workers are what the workers finish during one
// claim, within the ceiling, none before both estimates exist, held only through a backlog and not
// while the claims take jobs of tenants.
func TestAutoPrefetchSizing(t *testing.T) {
	p := New(Config{Queue: "q", MaxWorkers: 10, Prefetch: 40, AutoPrefetch: true})
	// locked runs f with p.mu held, as the producer calls what it tests.
	locked := func(f func()) {
		p.mu.Lock()
		defer p.mu.Unlock()
		f()
	}
	locked(func() { p.backlog = true })
	require.Equal(t, 10, p.Slots(), "no estimate of a claim yet")
	p.ObserveRun(time.Millisecond)
	require.Equal(t, 10, p.Slots(), "no estimate of a claim yet")
	locked(func() { p.observeClaim(2*time.Millisecond, nil) })
	require.Equal(t, 30, p.Slots(), "10 workers finish 20 jobs of 1 ms during a claim of 2 ms")
	locked(func() { p.observeClaim(time.Hour, context.DeadlineExceeded) })
	require.Equal(t, 30, p.Slots(), "a failed claim says nothing of the round trip")
	for range 100 {
		p.ObserveRun(time.Microsecond)
	}
	require.Equal(t, 50, p.Slots(), "short jobs: the ceiling")
	for range 100 {
		p.ObserveRun(time.Second)
	}
	require.Equal(t, 10, p.Slots(), "jobs longer than ten claims: nothing held")
	for range 100 {
		p.ObserveRun(time.Microsecond)
	}
	locked(func() { p.backlog = false })
	require.Equal(t, 10, p.Slots(), "no backlog: the workers' slots only")

	locked(func() {
		p.backlog = true
		p.observeTenants([]*store.Job{{ID: "a"}, {ID: "b", Tenant: "t1"}})
	})
	require.Equal(t, 10, p.Slots(), "a claim met jobs of tenants: none held ahead of their turns")
	locked(func() { p.observeTenants([]*store.Job{{ID: "c"}}) })
	require.Equal(t, 50, p.Slots(), "the claims meet no tenant any more")
	locked(func() { p.observeSideTenants([]*store.Job{{ID: "d", Tenant: "t2"}}) })
	require.Equal(t, 10, p.Slots(), "a side claim met jobs of a tenant: none held ahead")
	locked(func() { p.observeSideTenants([]*store.Job{{ID: "e"}}) })
	require.Equal(t, 10, p.Slots(), "a side claim without tenants leaves the Run loop's claim to decide")
	locked(func() { p.observeTenants([]*store.Job{{ID: "f"}}) })
	require.Equal(t, 50, p.Slots(), "the Run loop's claim meets no tenant: held ahead again")

	fixed := New(Config{Queue: "q", MaxWorkers: 10, Prefetch: 40})
	fixed.ObserveRun(time.Microsecond)
	require.Equal(t, 50, fixed.Slots(), "a fixed Prefetch holds its count whatever the jobs")
}

// TestAutoPrefetchClaimsAheadThroughABacklogOnly: a queue of short jobs whose claims take a while
// is claimed beyond its free workers while the backlog lasts, within the ceiling; once the queue
// runs dry, claims (and so what a claim advertises to a store's hand-off) cover the free workers
// only.
func TestAutoPrefetchClaimsAheadThroughABacklogOnly(t *testing.T) {
	q := &fakeQueue{left: 2000}
	var inClaim atomic.Int32
	slow := func(ctx context.Context, limit int) ([]*store.Job, error) {
		inClaim.Add(1)
		defer inClaim.Add(-1)
		time.Sleep(2 * time.Millisecond)
		return q.claim(ctx, limit)
	}
	var p *Producer
	p = New(Config{Queue: "q", MaxWorkers: 4, Prefetch: 20, AutoPrefetch: true, Claim: slow,
		PollInterval: time.Hour, Execute: func(_ *store.Job, _ time.Time, done func()) {
			go func() {
				p.ObserveRun(10 * time.Microsecond)
				done()
			}()
		}})
	ctx, cancel := context.WithCancel(context.Background())
	go p.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-p.Done()
	})
	require.Eventually(t, func() bool { return q.claimed.Load() == 2000 }, 30*time.Second, time.Millisecond)
	backlogLimits := q.claims()
	require.Equal(t, 4, backlogLimits[0], "the first claim: the free workers")
	most := 0
	for _, l := range backlogLimits {
		require.LessOrEqual(t, l, 24, "never beyond MaxWorkers + the ceiling")
		most = max(most, l)
	}
	require.Greater(t, most, 4, "the backlog was claimed ahead of the workers: %v", backlogLimits)
	// The queue runs dry: a claim comes back short, and no claim is left in flight.
	require.Eventually(t, func() bool { return p.InFlight() == 0 && p.Slots() == 4 && inClaim.Load() == 0 },
		5*time.Second, time.Millisecond)

	// A new job is claimed into the free workers only.
	n := len(q.claims())
	q.add(1)
	p.Wake()
	require.Eventually(t, func() bool { return q.claimed.Load() == 2001 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 4, q.claims()[n], "no backlog: a claim for the free workers only")
}
