package pronto_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store"
)

// tenantRateArgs is the job of the tenant-limit tests below.
type tenantRateArgs struct {
	N int `json:"n"`
}

func (tenantRateArgs) Kind() string { return "tenantrate.job" }

// tenantRateClaim claims up to n jobs of queue q straight from the store.
func tenantRateClaim(t *testing.T, s store.Store, q string, n int) []*store.Job {
	t.Helper()
	jobs, err := s.Claim(context.Background(), store.ClaimParams{Queue: q, Limit: n, WorkerID: "tenantrate-w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	return jobs
}

// TestTenantLimitWithRateKey: a tenant's limit binds its jobs that also carry a rate key, whose own
// limit has room (docs/fair-scheduling.md, "Limits"; ojs-rate-limiting.md §4.2: every limit that
// applies must be satisfied).
func TestTenantLimitWithRateKey(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: 1}))
		require.NoError(t, c.RateLimitSet(ctx, "partner-api", pronto.RateLimit{MaxActive: 10}))
		for i := range 3 {
			_, err := c.Insert(ctx, tenantRateArgs{N: i}, &pronto.InsertOpts{Tenant: "acme", RateKey: "partner-api"})
			require.NoError(t, err)
		}
		jobs := tenantRateClaim(t, ts.Store, pronto.DefaultQueue, 10)
		require.Len(t, jobs, 1, "tenant acme is limited to 1 active job")
		require.Empty(t, tenantRateClaim(t, ts.Store, pronto.DefaultQueue, 10), "acme is at its limit")
	})
}

// TestTenantLimitInfoActive: the limit stored under a tenant's limit key reports the tenant's active
// and waiting jobs, through the Go API and over HTTP.
func TestTenantLimitInfoActive(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: 2}))
		for i := range 3 {
			_, err := c.Insert(ctx, tenantRateArgs{N: i}, &pronto.InsertOpts{Tenant: "acme"})
			require.NoError(t, err)
		}
		jobs := tenantRateClaim(t, ts.Store, pronto.DefaultQueue, 10)
		require.Len(t, jobs, 2)
		info, err := c.RateLimitGet(ctx, pronto.TenantLimitKey("acme"))
		require.NoError(t, err)
		require.Equal(t, int64(2), info.Active, "active")
		require.Equal(t, int64(1), info.Waiting, "waiting")

		srv, err := server.New(server.Config{Client: c})
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close() })
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/ojs/v1/rate-limits/tenant:acme", nil))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var v struct {
			Concurrency struct {
				Limit  int `json:"limit"`
				Active int `json:"active"`
			} `json:"concurrency"`
			Waiting int `json:"waiting_count"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), rec.Body.String())
		require.Equal(t, 2, v.Concurrency.Limit, rec.Body.String())
		require.Equal(t, 2, v.Concurrency.Active, rec.Body.String())
		require.Equal(t, 1, v.Waiting, rec.Body.String())
	})
}
