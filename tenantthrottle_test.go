package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// fakeClock is a settable clock for the noisy-neighbour checks.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// nextTenantEvent returns the next event of ch, failing after a bound.
func nextTenantEvent(t *testing.T, ch <-chan *pronto.Event) *pronto.Event {
	t.Helper()
	select {
	case ev := <-ch:
		require.NotNil(t, ev.Tenant, "a tenant event carries its payload")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no tenant event")
		return nil
	}
}

// TestNoisyNeighborThrottle, on every store: a flooding tenant beside quiet ones is found noisy by
// queue depth; with throttling on, its stored weight is lowered (a fair claim then gives it fewer
// turns) until its throttle ends by time, restoring the weight; a manual reset restores it too,
// unless the weight was changed meanwhile, which is kept. A noisy tenant of weight 1 is not
// throttled. Each step emits its event once.
func TestNoisyNeighborThrottle(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, &pronto.Config{NoisyNeighbors: &pronto.NoisyNeighborConfig{
			Throttle: true, MinQueueDepth: 50, ThrottleFor: time.Hour, EnqueueRateRatio: -1, ErrorRateRatio: -1}})
		require.NoError(t, err)
		clock := &fakeClock{t: time.Now()}
		pronto.SetNoisyClock(c, clock.now)
		events, unsub := c.Subscribe(pronto.EventTenantThrottled, pronto.EventTenantThrottleReleased, pronto.EventTenantCreated)
		defer unsub()

		require.NoError(t, c.TenantSetWeight(ctx, "flood", 10))
		ev := nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantCreated, ev.Kind)
		require.Equal(t, pronto.TenantEvent{Tenant: "flood", Setting: "fairness_weight"}, *ev.Tenant)
		require.NoError(t, c.TenantSetWeight(ctx, "flood", 10)) // configured already: no event

		fill := func(flood int) {
			var ps []pronto.InsertManyParams
			for i := range flood {
				ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: "flood", Queue: "noisy"}},
					pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: "flood1", Queue: "noisy"}})
			}
			for _, q := range []string{"q1", "q2", "q3"} {
				for i := range 5 {
					ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: q, Queue: "noisy"}})
				}
			}
			_, err := c.InsertMany(ctx, ps)
			require.NoError(t, err)
		}
		var held []*store.Job // claimed, not finished yet
		drain := func() {
			for {
				got, err := s.Claim(ctx, store.ClaimParams{Queue: "noisy", Limit: 500, WorkerID: "w", LeaseDuration: time.Hour})
				require.NoError(t, err)
				held = append(held, got...)
				if len(got) == 0 {
					break
				}
			}
			// Finished: no tenant keeps active jobs (a noisy tenant of weight 1 with active jobs would
			// be throttled by concurrency, TestNoisyNeighborConcurrencyThrottle).
			cs := make([]store.Completion, len(held))
			for i, j := range held {
				cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
			}
			_, err := s.Finish(ctx, cs)
			require.NoError(t, err)
			held = nil
		}

		// Quiet tenants alone: nobody is noisy.
		fill(0)
		noisy, throttled, released, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy)
		require.Empty(t, throttled)
		require.Empty(t, released)

		// Two floods of 300 beside three tenants of 5: both noisy; flood (weight 10) is throttled to
		// 2, flood1 (weight 1) cannot be lowered.
		fill(300)
		noisy, throttled, released, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"flood": pronto.NoisyQueueDepth, "flood1": pronto.NoisyQueueDepth}, noisy)
		require.Equal(t, []string{"flood"}, throttled)
		require.Empty(t, released)
		ev = nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantThrottled, ev.Kind)
		th := ev.Tenant.Throttle
		require.Equal(t, "flood", th.Tenant)
		require.Equal(t, pronto.NoisyQueueDepth, th.Reason)
		require.Equal(t, pronto.ThrottleWeightReduced, th.Action)
		require.Equal(t, 10, th.OriginalWeight)
		require.Equal(t, 2, th.EffectiveWeight)
		require.Equal(t, float64(300), th.Value)
		require.True(t, th.Until.After(th.Since))
		info, err := c.TenantGet(ctx, "flood")
		require.NoError(t, err)
		require.Equal(t, 2, info.Weight, "the stored weight is the effective one")
		require.NotNil(t, info.Throttle)
		require.Equal(t, 10, info.Throttle.OriginalWeight)
		ths, err := c.TenantThrottles(ctx)
		require.NoError(t, err)
		require.Len(t, ths, 1)

		// A second check while it holds throttles nobody again.
		_, throttled, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, throttled)

		// A fair claim: each round takes 2 of flood's jobs and 1 of each other tenant's (6 a round),
		// where weight 10 took 10 of flood's first.
		claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "noisy", Limit: 12, WorkerID: "w", LeaseDuration: time.Hour})
		require.NoError(t, err)
		held = append(held, claimed...)
		per := map[string]int{}
		for _, j := range claimed {
			per[j.Tenant]++
		}
		require.Len(t, claimed, 12)
		require.LessOrEqual(t, per["flood"], 4, "claimed per tenant: %v", per)
		for _, q := range []string{"q1", "q2", "q3", "flood1"} {
			require.GreaterOrEqual(t, per[q], 1, "claimed per tenant: %v", per)
		}

		// Released by time once nothing waits any more (so it is not throttled again at once).
		drain()
		clock.add(2 * time.Hour)
		noisy, throttled, released, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy)
		require.Empty(t, throttled)
		require.Equal(t, []string{"flood"}, released)
		ev = nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantThrottleReleased, ev.Kind)
		require.Equal(t, pronto.ThrottleExpired, ev.Tenant.Release.Cause)
		require.Equal(t, 10, ev.Tenant.Release.Weight)
		require.False(t, ev.Tenant.Release.Kept)
		info, err = c.TenantGet(ctx, "flood")
		require.NoError(t, err)
		require.Equal(t, 10, info.Weight)
		require.True(t, info.WeightSet)
		require.Nil(t, info.Throttle)

		// Throttled again; an operator sets its weight meanwhile: a reset keeps the operator's.
		fill(300)
		_, throttled, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []string{"flood"}, throttled)
		require.Equal(t, pronto.EventTenantThrottled, nextTenantEvent(t, events).Kind)
		require.NoError(t, c.TenantSetWeight(ctx, "flood", 7))
		rel, err := c.TenantThrottleReset(ctx, "flood")
		require.NoError(t, err)
		require.True(t, rel.Kept)
		require.Equal(t, 7, rel.Weight)
		require.Equal(t, pronto.ThrottleReset, rel.Cause)
		ev = nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantThrottleReleased, ev.Kind)
		require.Equal(t, pronto.ThrottleReset, ev.Tenant.Release.Cause)
		info, err = c.TenantGet(ctx, "flood")
		require.NoError(t, err)
		require.Equal(t, 7, info.Weight)
		_, err = c.TenantThrottleReset(ctx, "flood")
		require.ErrorIs(t, err, pronto.ErrNotFound)
		_, err = c.TenantThrottleReset(ctx, "bad tenant")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)

		// Throttled from 7 to 1, reset untouched: 7 again.
		_, throttled, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []string{"flood"}, throttled)
		require.Equal(t, 1, nextTenantEvent(t, events).Tenant.Throttle.EffectiveWeight)
		rel, err = c.TenantThrottleReset(ctx, "flood")
		require.NoError(t, err)
		require.False(t, rel.Kept)
		require.Equal(t, 7, rel.Weight)
		require.Equal(t, pronto.EventTenantThrottleReleased, nextTenantEvent(t, events).Kind)
		info, err = c.TenantGet(ctx, "flood")
		require.NoError(t, err)
		require.Equal(t, 7, info.Weight)
		require.Nil(t, info.Throttle)

		select {
		case ev := <-events:
			t.Fatalf("an event too many: %s %+v", ev.Kind, ev.Tenant)
		default:
		}
	})
}

// TestNoisyNeighborConcurrencyThrottle, on every store: a tenant of weight 1 holding most active jobs
// cannot have its weight lowered, so its throttle bounds its concurrency (its limit's MaxActive,
// below its active jobs): a fair claim then passes it over. An operator's limit set meanwhile is
// kept at the release; otherwise the limit before is restored.
func TestNoisyNeighborConcurrencyThrottle(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, &pronto.Config{NoisyNeighbors: &pronto.NoisyNeighborConfig{Throttle: true, ThrottleFor: time.Hour,
			QueueDepthRatio: -1, EnqueueRateRatio: -1, ErrorRateRatio: -1, MinActive: 5}})
		require.NoError(t, err)
		clock := &fakeClock{t: time.Now()}
		pronto.SetNoisyClock(c, clock.now)
		events, unsub := c.Subscribe(pronto.EventTenantThrottled, pronto.EventTenantThrottleReleased, pronto.EventTenantCreated)
		defer unsub()
		insert := func(tenant string, n int) {
			ps := make([]pronto.InsertManyParams, n)
			for i := range ps {
				ps[i] = pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: tenant, Queue: "cq"}}
			}
			_, err := c.InsertMany(ctx, ps)
			require.NoError(t, err)
		}
		claim := func(n int) map[string]int {
			got, err := s.Claim(ctx, store.ClaimParams{Queue: "cq", Limit: n, WorkerID: "w", LeaseDuration: time.Hour})
			require.NoError(t, err)
			per := map[string]int{}
			for _, j := range got {
				per[j.Tenant]++
			}
			return per
		}

		insert("hog", 40)
		require.Equal(t, map[string]int{"hog": 20}, claim(20))
		insert("q1", 3)
		insert("q2", 3)
		noisy, throttled, _, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"hog": pronto.NoisyActiveJobs}, noisy)
		require.Equal(t, []string{"hog"}, throttled)
		ev := nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantThrottled, ev.Kind)
		th := ev.Tenant.Throttle
		require.Equal(t, pronto.ThrottleConcurrencyReduced, th.Action)
		require.Equal(t, 1, th.OriginalWeight)
		require.Equal(t, 1, th.EffectiveWeight)
		require.Nil(t, th.OriginalLimit)
		require.Equal(t, 4, th.EffectiveLimit.MaxActive, "20 active × 0.2")
		info, err := c.TenantGet(ctx, "hog")
		require.NoError(t, err)
		require.NotNil(t, info.Limit)
		require.Equal(t, 4, info.Limit.Limit.MaxActive)
		require.Equal(t, pronto.ThrottleConcurrencyReduced, info.Throttle.Action)

		// hog, at 20 active of at most 4, is passed over: the others' jobs are claimed, none of its.
		require.Equal(t, map[string]int{"q1": 3, "q2": 3}, claim(10))

		// The operator sets a limit meanwhile: the release by time keeps it.
		require.NoError(t, c.TenantSetLimit(ctx, "hog", pronto.RateLimit{MaxActive: 8}))
		// Its first configuration by an operator (the throttle's limit does not count).
		require.Equal(t, pronto.TenantEvent{Tenant: "hog", Setting: "limits"}, *nextTenantEvent(t, events).Tenant)
		clock.add(2 * time.Hour)
		_, throttled, released, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []string{"hog"}, released)
		require.Empty(t, throttled, "nobody waits behind hog")
		ev = nextTenantEvent(t, events)
		require.Equal(t, pronto.EventTenantThrottleReleased, ev.Kind)
		require.True(t, ev.Tenant.Release.Kept)
		require.Equal(t, 8, ev.Tenant.Release.Limit.MaxActive)
		info, err = c.TenantGet(ctx, "hog")
		require.NoError(t, err)
		require.Equal(t, 8, info.Limit.Limit.MaxActive)
		require.Nil(t, info.Throttle)

		// Throttled below the operator's 8; a reset restores the 8.
		insert("q3", 3)
		_, throttled, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []string{"hog"}, throttled)
		th = nextTenantEvent(t, events).Tenant.Throttle
		require.Equal(t, 8, th.OriginalLimit.MaxActive)
		require.Equal(t, 1, th.EffectiveLimit.MaxActive)
		rel, err := c.TenantThrottleReset(ctx, "hog")
		require.NoError(t, err)
		require.False(t, rel.Kept)
		require.Equal(t, 8, rel.Limit.MaxActive)
		require.Equal(t, pronto.EventTenantThrottleReleased, nextTenantEvent(t, events).Kind)
		info, err = c.TenantGet(ctx, "hog")
		require.NoError(t, err)
		require.Equal(t, 8, info.Limit.Limit.MaxActive)

		select {
		case ev := <-events:
			t.Fatalf("an event too many: %s %+v", ev.Kind, ev.Tenant)
		default:
		}
	})
}

// TestNoisyNeighborSignals: the active share, enqueue rate and error rate signals, each alone, and
// their floors, on every store.
func TestNoisyNeighborSignals(t *testing.T) {
	for _, signal := range []string{"active share", "enqueue rate", "error rate"} {
		t.Run(signal, func(t *testing.T) {
			coalesceStores(t, func(t *testing.T, s store.Store) { testNoisyNeighborSignal(t, s, signal) })
		})
	}
	t.Run("config", func(t *testing.T) {
		for _, bad := range []pronto.NoisyNeighborConfig{
			{Interval: time.Millisecond}, {ActiveShare: 1}, {WeightFactor: 1}, {WeightFactor: -0.5}, {MinActive: -1}, {ThrottleFor: -time.Second},
		} {
			_, err := pronto.NewClient(newTestStore(t, "memory").Store, &pronto.Config{NoisyNeighbors: &bad})
			require.ErrorIs(t, err, pronto.ErrInvalidArgs, fmt.Sprintf("%+v", bad))
		}
	})
}

// testNoisyNeighborSignal runs the case of one signal on a fresh store.
func testNoisyNeighborSignal(t *testing.T, base store.Store, signal string) {
	ctx := context.Background()
	newClient := func(t *testing.T, nn pronto.NoisyNeighborConfig) (*pronto.Client, store.Store) {
		c, err := pronto.NewClient(base, &pronto.Config{NoisyNeighbors: &nn})
		require.NoError(t, err)
		return c, base
	}
	insert := func(t *testing.T, c *pronto.Client, tenant string, n int) {
		ps := make([]pronto.InsertManyParams, n)
		for i := range ps {
			ps[i] = pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: tenant, Queue: "sig"}}
		}
		_, err := c.InsertMany(ctx, ps)
		require.NoError(t, err)
	}
	claimOf := func(t *testing.T, s store.Store, tenant string, n int) []*store.Job {
		var out []*store.Job
		for len(out) < n {
			got, err := s.Claim(ctx, store.ClaimParams{Queue: "sig", Limit: 1, WorkerID: "w", LeaseDuration: time.Hour})
			require.NoError(t, err)
			require.NotEmpty(t, got)
			if got[0].Tenant == tenant {
				out = append(out, got[0])
			} else {
				// Another tenant's job: put it back for later.
				_, err = s.Finish(ctx, []store.Completion{{ID: got[0].ID, Attempt: got[0].Attempt, Token: got[0].ClaimToken,
					State: store.StateAvailable, RefundAttempt: true}})
				require.NoError(t, err)
			}
		}
		return out
	}

	if signal == "active share" {
		c, s := newClient(t, pronto.NoisyNeighborConfig{QueueDepthRatio: -1, EnqueueRateRatio: -1, ErrorRateRatio: -1, MinActive: 5})
		insert(t, c, "big", 20)
		insert(t, c, "small", 3)
		claimOf(t, s, "big", 4)
		noisy, _, _, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy, "4 active: under MinActive")
		claimOf(t, s, "big", 2)
		noisy, _, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"big": pronto.NoisyActiveJobs}, noisy)
	}

	if signal == "enqueue rate" {
		c, _ := newClient(t, pronto.NoisyNeighborConfig{QueueDepthRatio: -1, ActiveShare: -1, ErrorRateRatio: -1})
		clock := &fakeClock{t: time.Now()}
		pronto.SetNoisyClock(c, clock.now)
		for _, tn := range []string{"fast", "slow1", "slow2"} {
			insert(t, c, tn, 2)
		}
		noisy, _, _, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy, "the first check has no rate to compare")
		insert(t, c, "fast", 100)
		insert(t, c, "slow1", 1)
		insert(t, c, "slow2", 2)
		clock.add(10 * time.Second)
		noisy, _, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"fast": pronto.NoisyEnqueueRate}, noisy)
		insert(t, c, "fast", 5) // 0.5 a second: under MinEnqueueRate
		clock.add(10 * time.Second)
		noisy, _, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy)
	}

	if signal == "error rate" {
		c, s := newClient(t, pronto.NoisyNeighborConfig{QueueDepthRatio: -1, ActiveShare: -1, EnqueueRateRatio: -1, MinFinished: 10})
		for _, tn := range []string{"bad", "good1", "good2"} {
			insert(t, c, tn, 30)
		}
		noisy, _, _, err := pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Empty(t, noisy)
		finish := func(tenant string, done, failed int) {
			jobs := claimOf(t, s, tenant, done+failed)
			var cs []store.Completion
			for i, j := range jobs {
				st := store.StateCompleted
				if i < failed {
					st = store.StateDiscarded
				}
				cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: st})
			}
			_, err := s.Finish(ctx, cs)
			require.NoError(t, err)
		}
		finish("bad", 5, 10)  // 2/3 discarded
		finish("good1", 9, 1) // 1/10
		finish("good2", 10, 0)
		noisy, _, _, err = pronto.CheckNoisyNeighbors(ctx, c)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"bad": pronto.NoisyErrorRate}, noisy, "others' average 0.05: 3× is 0.15")
	}
}

// TestNoisyNeighborLeaderTask: a started client with NoisyNeighbors runs the check as its leader's
// task: a flooding tenant is throttled without a direct call.
func TestNoisyNeighborLeaderTask(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, "memory").Store
	cfg := fastConfig(nil, nil)
	cfg.NoisyNeighbors = &pronto.NoisyNeighborConfig{Interval: 100 * time.Millisecond, Throttle: true}
	c := startClient(t, s, cfg)
	require.NoError(t, c.TenantSetWeight(ctx, "flood", 5))
	var ps []pronto.InsertManyParams
	for i := range 200 {
		ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: "flood", Queue: "lt"}})
	}
	for _, q := range []string{"a", "b", "c"} {
		ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{}, Opts: &pronto.InsertOpts{Tenant: q, Queue: "lt"}})
	}
	_, err := c.InsertMany(ctx, ps)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := c.TenantGet(ctx, "flood")
		require.NoError(t, err)
		return info.Throttle != nil && info.Weight == 1
	}, 20*time.Second, 20*time.Millisecond)
}

// BenchmarkNoisyNeighborCheck measures one noisy-neighbour check (the throttles' setting read and
// the count of every tenant's jobs, store.TenantStore.ListTenants, then the judging) with 10,000
// tenants of 10 jobs each (100,000 jobs) on every store.
func BenchmarkNoisyNeighborCheck(b *testing.B) {
	const tenants, perTenant = 10000, 10
	run := func(b *testing.B, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, &pronto.Config{NoisyNeighbors: &pronto.NoisyNeighborConfig{}})
		require.NoError(b, err)
		ps := make([]pronto.InsertManyParams, 0, 1000)
		for i := range tenants * perTenant {
			ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: fmt.Sprintf("t%05d", i/perTenant), Queue: "bench"}})
			if len(ps) == cap(ps) {
				_, err := c.InsertMany(ctx, ps)
				require.NoError(b, err)
				ps = ps[:0]
			}
		}
		b.ResetTimer()
		for range b.N {
			_, _, _, err := pronto.CheckNoisyNeighbors(ctx, c)
			require.NoError(b, err)
		}
	}
	for _, kind := range allStores {
		b.Run(string(kind), func(b *testing.B) { run(b, newTestStore(b, kind).Store) })
	}
}

// clusterLikeStore refuses tenant counts and weights as a Redis Cluster does.
type clusterLikeStore struct{ store.Store }

func (s clusterLikeStore) ListTenants(context.Context) ([]*store.TenantInfo, error) {
	return nil, fmt.Errorf("tenant stats on a cluster: %w", store.ErrUnsupported)
}
func (s clusterLikeStore) GetTenant(context.Context, string) (*store.TenantInfo, error) {
	return nil, fmt.Errorf("tenant stats on a cluster: %w", store.ErrUnsupported)
}
func (s clusterLikeStore) SetTenantWeight(context.Context, string, int) error {
	return fmt.Errorf("tenant weights on a cluster: %w", store.ErrUnsupported)
}
func (s clusterLikeStore) DeleteTenantWeight(context.Context, string) error {
	return fmt.Errorf("tenant weights on a cluster: %w", store.ErrUnsupported)
}

// Settings work on a cluster (one key each).
func (s clusterLikeStore) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	return s.Store.(store.SettingStore).GetSetting(ctx, key)
}
func (s clusterLikeStore) SetSetting(ctx context.Context, key string, v json.RawMessage) error {
	return s.Store.(store.SettingStore).SetSetting(ctx, key, v)
}

// TestNoisyNeighborUnsupported: on a store that cannot count tenants (a Redis Cluster), a check
// fails with ErrUnsupported and throttles nothing.
func TestNoisyNeighborUnsupported(t *testing.T) {
	ctx := context.Background()
	s := clusterLikeStore{newTestStore(t, "memory").Store}
	c, err := pronto.NewClient(s, &pronto.Config{NoisyNeighbors: &pronto.NoisyNeighborConfig{Throttle: true}})
	require.NoError(t, err)
	_, throttled, _, err := pronto.CheckNoisyNeighbors(ctx, c)
	require.ErrorIs(t, err, pronto.ErrUnsupported)
	require.Empty(t, throttled)
	_, err = c.TenantThrottleReset(ctx, "acme")
	require.ErrorIs(t, err, pronto.ErrNotFound)
	ths, err := c.TenantThrottles(ctx)
	require.NoError(t, err)
	require.Empty(t, ths)
}

// TestThrottleExpiresWithoutChecks: a throttle outlives the noisy-neighbour checks that set it (the
// client stopped, or the cluster's leader now runs without NoisyNeighbors): a leader without them
// still releases it at its end, restoring the tenant's weight. It used to stay for good.
func TestThrottleExpiresWithoutChecks(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, "memory").Store
	cfg := fastConfig(nil, nil)
	cfg.NoisyNeighbors = &pronto.NoisyNeighborConfig{Interval: 100 * time.Millisecond, Throttle: true, ThrottleFor: 2 * time.Second}
	checker, err := pronto.NewClient(s, cfg)
	require.NoError(t, err)
	require.NoError(t, checker.Start(ctx))
	require.NoError(t, checker.TenantSetWeight(ctx, "flood", 5))
	var ps []pronto.InsertManyParams
	for i := range 200 {
		ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{N: i}, Opts: &pronto.InsertOpts{Tenant: "flood", Queue: "te"}})
	}
	for _, q := range []string{"a", "b", "c"} {
		ps = append(ps, pronto.InsertManyParams{Args: tenantArgs{}, Opts: &pronto.InsertOpts{Tenant: q, Queue: "te"}})
	}
	_, err = checker.InsertMany(ctx, ps)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := checker.TenantGet(ctx, "flood")
		require.NoError(t, err)
		return info.Throttle != nil && info.Weight == 1
	}, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, checker.Stop(ctx))
	ths, err := checker.TenantThrottles(ctx)
	require.NoError(t, err)
	require.Contains(t, ths, "flood", "the throttle outlives the client that set it")

	plain, err := pronto.NewClient(s, fastConfig(nil, nil))
	require.NoError(t, err)
	pronto.SetThrottleExpiryInterval(plain, 50*time.Millisecond)
	require.NoError(t, plain.Start(ctx))
	t.Cleanup(func() { _ = plain.Stop(ctx) })
	require.Eventually(t, func() bool {
		info, err := plain.TenantGet(ctx, "flood")
		require.NoError(t, err)
		return info.Throttle == nil && info.Weight == 5
	}, 30*time.Second, 20*time.Millisecond, "a leader without noisy-neighbour checks releases the expired throttle")
}
