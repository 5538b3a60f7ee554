package pronto_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// Two clients on one store, as two processes, change one setting at once: the second has read the
// setting (held there by settingGate) when the first writes its change. Each change applies to the
// setting as stored when it is written, so both stay.

// TestClientsSetTenantBoostsTogether: boosts of two tenants set through two clients at once.
func TestClientsSetTenantBoostsTogether(t *testing.T) {
	a, b, g := gatedClients(t)
	ctx := context.Background()
	g.hold(t, "tenant_priority_boosts", func(ctx context.Context) error { return b.TenantSetPriorityBoost(ctx, "gold", 5) },
		func() { require.NoError(t, a.TenantSetPriorityBoost(ctx, "lead", -5)) })
	boosts, err := a.TenantPriorityBoosts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gold": 5, "lead": -5}, boosts)
}

// TestClientsSetQueueRetentionsTogether: one queue's completed retention and another field of it,
// and another queue's dead letter retention, set through two clients at once.
func TestClientsSetQueueRetentionsTogether(t *testing.T) {
	a, b, g := gatedClients(t)
	ctx := context.Background()
	g.hold(t, "queue.retention", func(ctx context.Context) error {
		return b.QueueRetentionUpdate(ctx, "q", func(r pronto.QueueRetention) pronto.QueueRetention {
			r.Completed = time.Hour
			return r
		})
	}, func() {
		require.NoError(t, a.QueueRetentionUpdate(ctx, "q", func(r pronto.QueueRetention) pronto.QueueRetention {
			r.Cancelled = 2 * time.Hour
			return r
		}))
	})
	rs, err := a.QueueRetentions(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]pronto.QueueRetention{"q": {Completed: time.Hour, Cancelled: 2 * time.Hour}}, rs)

	g.hold(t, "dead_letter.queue_retention", func(ctx context.Context) error {
		return b.DeadLetterRetentionSet(ctx, "billing", pronto.DeadLetterRetention{MaxCount: 10})
	}, func() {
		require.NoError(t, a.DeadLetterRetentionSet(ctx, "mail", pronto.DeadLetterRetention{MaxAge: time.Hour}))
	})
	dl, err := a.DeadLetterRetentions(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]pronto.DeadLetterRetention{"billing": {MaxCount: 10}, "mail": {MaxAge: time.Hour}}, dl)
}

// TestClientsChangePoolsTogether: a pool deleted through one client while another creates one.
func TestClientsChangePoolsTogether(t *testing.T) {
	a, b, g := gatedClients(t)
	ctx := context.Background()
	require.NoError(t, a.PoolSet(ctx, pronto.WorkerPool{Name: "old", Queues: []string{"q1"}}))
	g.hold(t, "worker_pools", func(ctx context.Context) error {
		return b.PoolSet(ctx, pronto.WorkerPool{Name: "new", Queues: []string{"q2"}})
	}, func() { require.NoError(t, a.PoolDelete(ctx, "old")) })
	pools, err := a.PoolList(ctx)
	require.NoError(t, err)
	require.Len(t, pools, 1)
	require.Equal(t, "new", pools[0].Name)
}

// TestClientsResetThrottlesTogether: two tenants' throttles reset through two clients at once (the
// second has read the throttles when the first drops its tenant's): both end.
func TestClientsResetThrottlesTogether(t *testing.T) {
	a, b, g := gatedClients(t)
	ctx := context.Background()
	now := time.Now().UTC()
	th := func(tenant string) pronto.TenantThrottle {
		return pronto.TenantThrottle{Tenant: tenant, Reason: pronto.NoisyQueueDepth, Action: pronto.ThrottleWeightReduced,
			OriginalWeight: 1, EffectiveWeight: 1, Since: now, Until: now.Add(time.Hour)}
	}
	raw, err := json.Marshal(map[string]pronto.TenantThrottle{"x": th("x"), "y": th("y")})
	require.NoError(t, err)
	require.NoError(t, g.Store.SetSetting(ctx, "tenant_throttles", raw))
	// b's reset reads the throttles once to find its own, then again to drop it: the second is held.
	g.holdAfter(t, "tenant_throttles", 1, func(ctx context.Context) error {
		_, err := b.TenantThrottleReset(ctx, "y")
		return err
	}, func() {
		_, err := a.TenantThrottleReset(ctx, "x")
		require.NoError(t, err)
	})
	ths, err := a.TenantThrottles(ctx)
	require.NoError(t, err)
	require.Empty(t, ths, "a throttle reset through one client came back through the other's")
}

// settingGate is a memory store whose first read of one setting in a call marked by hold waits
// until hold's other change is made.
type settingGate struct {
	*memory.Store
	mu      sync.Mutex
	key     string
	skip    int // reads of key in the marked call let through before the one held
	reached chan struct{}
	release chan struct{}
}

type gateMark struct{}

func (g *settingGate) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	v, err := g.Store.GetSetting(ctx, key)
	if ctx.Value(gateMark{}) == nil {
		return v, err
	}
	g.mu.Lock()
	hold := g.key == key && g.skip == 0
	if hold {
		g.key = ""
	} else if g.key == key {
		g.skip--
	}
	g.mu.Unlock()
	if hold {
		close(g.reached)
		<-g.release
	}
	return v, err
}

// hold runs held, a change whose first read of key waits, and meanwhile other; held must succeed.
func (g *settingGate) hold(t *testing.T, key string, held func(context.Context) error, other func()) {
	t.Helper()
	g.holdAfter(t, key, 0, held, other)
}

// holdAfter is hold with the first skip reads of key in held let through.
func (g *settingGate) holdAfter(t *testing.T, key string, skip int, held func(context.Context) error, other func()) {
	t.Helper()
	g.mu.Lock()
	g.key, g.skip, g.reached, g.release = key, skip, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- held(context.WithValue(context.Background(), gateMark{}, true)) }()
	<-g.reached
	other()
	close(g.release)
	require.NoError(t, <-done)
}

// gatedClients returns two clients on one memory store, the second through a settingGate.
func gatedClients(t *testing.T) (*pronto.Client, *pronto.Client, *settingGate) {
	t.Helper()
	st := memory.New()
	g := &settingGate{Store: st}
	a, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	b, err := pronto.NewClient(g, nil)
	require.NoError(t, err)
	return a, b, g
}
