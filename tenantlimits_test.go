package pronto_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// waitInsert retries insert until it succeeds (a recount made room), failing the test after 10 s.
func waitInsert(t *testing.T, insert func() error, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := insert()
		if err == nil {
			return
		}
		require.ErrorIs(t, err, pronto.ErrTenantLimit)
		require.True(t, time.Now().Before(deadline), why)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTenantEnqueueLimits: a tenant's max_queue_depth, max_scheduled and enqueue rate refuse the insert
// that would exceed them with a typed error, a batch whole, leave other tenants alone, and take jobs
// again once jobs started or the limits are lifted; on every store.
func TestTenantEnqueueLimits(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		acme := func() *pronto.InsertOpts { return &pronto.InsertOpts{Tenant: "acme"} }
		later := func() *pronto.InsertOpts {
			return &pronto.InsertOpts{Tenant: "acme", ScheduledAt: time.Now().Add(time.Hour)}
		}

		require.ErrorIs(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: -1}), pronto.ErrInvalidArgs)
		require.ErrorIs(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 3}), pronto.ErrInvalidArgs)
		require.ErrorIs(t, c.TenantSetEnqueueLimits(ctx, "bad tenant", pronto.TenantEnqueueLimits{MaxScheduled: 1}), pronto.ErrInvalidArgs)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 3, MaxScheduled: 1}))
		info, err := c.TenantGet(ctx, "acme")
		require.NoError(t, err, "enqueue limits alone make a tenant known")
		require.Equal(t, &pronto.TenantEnqueueLimits{MaxQueueDepth: 3, MaxScheduled: 1}, info.EnqueueLimits)

		_, err = c.Insert(ctx, tenantArgs{N: 0}, later())
		require.NoError(t, err)
		_, err = c.Insert(ctx, tenantArgs{N: 1}, later())
		require.ErrorIs(t, err, pronto.ErrTenantLimit)
		var tl *pronto.TenantLimitError
		require.ErrorAs(t, err, &tl)
		require.Equal(t, "acme", tl.Tenant)
		require.Equal(t, pronto.TenantLimitScheduled, tl.Limit)
		require.Equal(t, int64(1), tl.Current)
		require.Equal(t, int64(1), tl.Maximum)
		require.Positive(t, tl.RetryAfter)

		var ids []string
		for i := range 2 {
			j, err := c.Insert(ctx, tenantArgs{N: 10 + i}, acme())
			require.NoError(t, err)
			ids = append(ids, j.ID)
		}
		_, err = c.Insert(ctx, tenantArgs{N: 20}, acme())
		require.ErrorAs(t, err, &tl)
		require.Equal(t, pronto.TenantLimitError{Tenant: "acme", Limit: pronto.TenantLimitQueueDepth, Current: 3, Maximum: 3, Adding: 1, RetryAfter: tl.RetryAfter}, *tl)

		// Other tenants and tenantless jobs are not limited; a batch touching acme is refused whole.
		_, err = c.Insert(ctx, tenantArgs{N: 30}, &pronto.InsertOpts{Tenant: "beta"})
		require.NoError(t, err)
		_, err = c.Insert(ctx, tenantArgs{N: 31}, nil)
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: tenantArgs{N: 32}, Opts: &pronto.InsertOpts{Tenant: "beta"}},
			{Args: tenantArgs{N: 33}, Opts: acme()},
		})
		require.ErrorIs(t, err, pronto.ErrTenantLimit)
		beta, err := c.TenantGet(ctx, "beta")
		require.NoError(t, err)
		require.Equal(t, int64(1), beta.Counts[pronto.StateAvailable], "nothing of a refused batch is stored")

		// A cancelled job makes room once the client recounts (within half a second).
		_, err = c.JobCancel(ctx, ids[0])
		require.NoError(t, err)
		waitInsert(t, func() error { _, err := c.Insert(ctx, tenantArgs{N: 40}, acme()); return err }, "a cancelled job never made room")

		// A second client sees the limits too, from the store.
		c2, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		_, err = c2.Insert(ctx, tenantArgs{N: 41}, acme())
		require.ErrorIs(t, err, pronto.ErrTenantLimit)

		// The enqueue rate: 2 per hour, counted by each client.
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "gamma", pronto.TenantEnqueueLimits{EnqueueRate: 2, EnqueuePeriod: time.Hour}))
		gamma := &pronto.InsertOpts{Tenant: "gamma"}
		for i := range 2 {
			_, err := c.Insert(ctx, tenantArgs{N: 50 + i}, gamma)
			require.NoError(t, err)
		}
		_, err = c.Insert(ctx, tenantArgs{N: 52}, gamma)
		require.ErrorAs(t, err, &tl)
		require.Equal(t, pronto.TenantLimitEnqueueRate, tl.Limit)
		require.Equal(t, int64(2), tl.Current)
		require.Greater(t, tl.RetryAfter, 59*time.Minute)

		list, err := c.TenantList(ctx)
		require.NoError(t, err)
		got := map[string]*pronto.TenantEnqueueLimits{}
		for _, i := range list {
			got[i.Tenant] = i.EnqueueLimits
		}
		require.Equal(t, map[string]*pronto.TenantEnqueueLimits{
			"acme":  {MaxQueueDepth: 3, MaxScheduled: 1},
			"beta":  nil,
			"gamma": {EnqueueRate: 2, EnqueuePeriod: time.Hour},
		}, got)

		// Lifting the limits lets everything in at once.
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{}))
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "gamma", pronto.TenantEnqueueLimits{}))
		for i := range 5 {
			_, err := c.Insert(ctx, tenantArgs{N: 60 + i}, later())
			require.NoError(t, err)
			_, err = c.Insert(ctx, tenantArgs{N: 70 + i}, gamma)
			require.NoError(t, err)
		}
		els, err := c.TenantEnqueueLimits(ctx)
		require.NoError(t, err)
		require.Empty(t, els)
	})
}

// countingTenants counts the store reads an insert-only client makes for tenant enqueue limits.
type countingTenants struct {
	store.Store
	settingReads, tenantReads atomic.Int64
	// boostReads counts the reads of the priority boosts' setting (also in settingReads).
	boostReads atomic.Int64
}

func (s *countingTenants) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	s.settingReads.Add(1)
	if key == "tenant_priority_boosts" {
		s.boostReads.Add(1)
	}
	return s.Store.(store.SettingStore).GetSetting(ctx, key)
}

func (s *countingTenants) SetSetting(ctx context.Context, key string, v json.RawMessage) error {
	return s.Store.(store.SettingStore).SetSetting(ctx, key, v)
}

func (s *countingTenants) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	s.tenantReads.Add(1)
	return s.Store.(store.TenantStore).GetTenant(ctx, tenant)
}

func (s *countingTenants) SetTenantWeight(ctx context.Context, tenant string, w int) error {
	return s.Store.(store.TenantStore).SetTenantWeight(ctx, tenant, w)
}

func (s *countingTenants) DeleteTenantWeight(ctx context.Context, tenant string) error {
	return s.Store.(store.TenantStore).DeleteTenantWeight(ctx, tenant)
}

func (s *countingTenants) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	return s.Store.(store.TenantStore).ListTenants(ctx)
}

// BenchmarkInsertTenantLimits measures single inserts of a tenant's jobs without and with enqueue
// limits per store, and reports the store reads the limits cost per insert (setting-reads/op,
// tenant-reads/op): about one per boundsEvery (1 s) and one per depthEvery (0.5 s) per limited
// tenant, not one per insert.
func BenchmarkInsertTenantLimits(b *testing.B) {
	for _, kind := range allStores {
		for _, limited := range []bool{false, true} {
			name := string(kind) + "/unlimited"
			if limited {
				name = string(kind) + "/limited"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				ts := newTestStore(b, kind)
				cs := &countingTenants{Store: ts.Store}
				c, err := pronto.NewClient(cs, nil)
				if err != nil {
					b.Fatal(err)
				}
				if limited {
					if err := c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 1 << 40, MaxScheduled: 1 << 40, EnqueueRate: 1 << 40, EnqueuePeriod: time.Hour}); err != nil {
						b.Fatal(err)
					}
				}
				opts := &pronto.InsertOpts{Tenant: "acme"}
				cs.settingReads.Store(0)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := c.Insert(ctx, noopArgs{N: i}, opts); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(cs.settingReads.Load())/float64(b.N), "setting-reads/op")
				b.ReportMetric(float64(cs.tenantReads.Load())/float64(b.N), "tenant-reads/op")
			})
		}
	}
}
