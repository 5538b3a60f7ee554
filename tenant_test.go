package pronto_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertTenant: a job's tenant is stored and returned on every store; a bad one is refused.
func TestInsertTenant(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		j, err := c.Insert(ctx, bpArgs{N: 1}, &pronto.InsertOpts{Tenant: "tenant_acme-corp"})
		require.NoError(t, err)
		require.Equal(t, "tenant_acme-corp", j.Tenant)
		got, err := c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, "tenant_acme-corp", got.Tenant)
		for _, bad := range []string{"has space", strings.Repeat("t", 256), "tab\t"} {
			_, err := c.Insert(ctx, bpArgs{N: 2}, &pronto.InsertOpts{Tenant: bad})
			require.ErrorIs(t, err, pronto.ErrInvalidArgs, bad)
		}
	})
}

type tenantArgs struct {
	N int `json:"n"`
}

func (tenantArgs) Kind() string { return "tenant.job" }

// TestTenantConfig: weights, limits and per-tenant counts through the Go API, on every store.
func TestTenantConfig(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)

		_, err = c.TenantGet(ctx, "acme")
		require.ErrorIs(t, err, pronto.ErrNotFound)
		require.NoError(t, c.TenantSetWeight(ctx, "acme", 3))
		require.ErrorIs(t, c.TenantSetWeight(ctx, "acme", 0), pronto.ErrInvalidArgs)
		require.ErrorIs(t, c.TenantSetWeight(ctx, "bad tenant", 2), pronto.ErrInvalidArgs)
		require.NoError(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: 2}))
		require.ErrorIs(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: 2, OnLimit: pronto.LimitDrop}), pronto.ErrInvalidArgs)
		for i := range 3 {
			_, err := c.Insert(ctx, tenantArgs{N: i}, &pronto.InsertOpts{Tenant: "acme"})
			require.NoError(t, err)
		}
		_, err = c.Insert(ctx, tenantArgs{N: 9}, &pronto.InsertOpts{Tenant: "beta", Queue: "other"})
		require.NoError(t, err)

		info, err := c.TenantGet(ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, 3, info.Weight)
		require.True(t, info.WeightSet)
		require.Equal(t, int64(3), info.Counts[pronto.StateAvailable])
		require.NotNil(t, info.Limit)
		require.Equal(t, 2, info.Limit.Limit.MaxActive)

		// A limit alone makes a tenant known.
		require.NoError(t, c.TenantSetLimit(ctx, "gamma", pronto.RateLimit{Rate: 5, Period: time.Minute}))
		list, err := c.TenantList(ctx)
		require.NoError(t, err)
		var names []string
		for _, i := range list {
			names = append(names, i.Tenant)
		}
		require.Equal(t, []string{"acme", "beta", "gamma"}, names)
		require.Equal(t, pronto.DefaultTenantWeight, list[1].Weight)
		require.Equal(t, int64(1), list[1].Counts[pronto.StateAvailable])
		require.Nil(t, list[1].Limit)
		require.Equal(t, 5, list[2].Limit.Limit.Rate)

		require.NoError(t, c.TenantDeleteWeight(ctx, "acme"))
		require.ErrorIs(t, c.TenantDeleteWeight(ctx, "acme"), pronto.ErrNotFound)
		require.NoError(t, c.TenantDeleteLimit(ctx, "gamma"))
		_, err = c.TenantGet(ctx, "gamma")
		require.ErrorIs(t, err, pronto.ErrNotFound)
	})
}

// TestTenantLimitHoldsWorkers: a tenant limited to one active job never runs two at once, however
// many workers are free, while another tenant's jobs run beside it; every job runs.
func TestTenantLimitHoldsWorkers(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var mu sync.Mutex
		running, most, done := map[string]int{}, map[string]int{}, 0
		release := make(chan struct{})
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[tenantArgs]) error {
			mu.Lock()
			running[j.Tenant]++
			most[j.Tenant] = max(most[j.Tenant], running[j.Tenant])
			mu.Unlock()
			<-release
			mu.Lock()
			running[j.Tenant]--
			done++
			mu.Unlock()
			return nil
		}))
		c, err := pronto.NewClient(ts.Store, heldConfig(ws, defaultQueue(6)))
		require.NoError(t, err)
		require.NoError(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: 1}))
		for i := range 4 {
			_, err := c.Insert(ctx, tenantArgs{N: i}, &pronto.InsertOpts{Tenant: "acme"})
			require.NoError(t, err)
			_, err = c.Insert(ctx, tenantArgs{N: 10 + i}, &pronto.InsertOpts{Tenant: "beta"})
			require.NoError(t, err)
		}
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() {
			stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Stop(stop)
		})
		// beta's 4 jobs and one of acme's start; acme's others wait for its slot.
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return running["beta"] == 4 && running["acme"] == 1
		}, 10*time.Second, 10*time.Millisecond)
		close(release)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done == 8
		}, 20*time.Second, 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, most["acme"], "acme never ran two jobs at once")
	})
}
