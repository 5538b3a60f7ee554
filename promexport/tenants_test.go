package promexport_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
)

// TestTenantMetrics: with Options.TenantLabels, inserted, completed and discarded jobs are counted per
// tenant and queue (tenant_id label) and the tenants' jobs per state are a gauge; without it no
// series carries tenant_id. On every store.
func TestTenantMetrics(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[okArgs]) error { return nil }))
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[failArgs]) error {
				return errors.New("boom")
			}))
			st := openStore(t, kind)
			on := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond, TenantLabels: true})
			off := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
			cfg := &pronto.Config{
				Queues:      map[string]pronto.QueueConfig{"default": {MaxWorkers: 2}, "mail": {MaxWorkers: 2}},
				Workers:     workers,
				RetryPolicy: pronto.RetryPolicy{MaxAttempts: 1},
			}
			on.Instrument(cfg)
			off.Instrument(cfg)
			client, err := pronto.NewClient(st, cfg)
			require.NoError(t, err)
			defer on.Attach(client)()
			defer off.Attach(client)()
			regOn, regOff := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
			require.NoError(t, regOn.Register(on))
			require.NoError(t, regOff.Register(off))

			require.NoError(t, client.Start(ctx))
			defer client.Stop(ctx)
			for range 2 {
				_, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: "mail", Tenant: "acme"})
				require.NoError(t, err)
			}
			_, err = client.Insert(ctx, failArgs{}, &pronto.InsertOpts{Tenant: "acme"})
			require.NoError(t, err)
			_, err = client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Tenant: "beta"})
			require.NoError(t, err)
			_, err = client.Insert(ctx, okArgs{}, nil)
			require.NoError(t, err)

			want := map[string]float64{
				`ojs_tenant_jobs_enqueued_total{queue="mail",tenant_id="acme"}`:     2,
				`ojs_tenant_jobs_enqueued_total{queue="default",tenant_id="acme"}`:  1,
				`ojs_tenant_jobs_enqueued_total{queue="default",tenant_id="beta"}`:  1,
				`ojs_tenant_jobs_processed_total{queue="mail",tenant_id="acme"}`:    2,
				`ojs_tenant_jobs_processed_total{queue="default",tenant_id="beta"}`: 1,
				`ojs_tenant_jobs_failed_total{queue="default",tenant_id="acme"}`:    1,
				`ojs_tenant_jobs{state="completed",tenant_id="acme"}`:               2,
				`ojs_tenant_jobs{state="discarded",tenant_id="acme"}`:               1,
				`ojs_tenant_jobs{state="available",tenant_id="acme"}`:               0,
				`ojs_tenant_jobs{state="completed",tenant_id="beta"}`:               1,
				`ojs_job_enqueued_total{queue="default",type="metrics.ok"}`:         2,
			}
			srvOn := httptest.NewServer(promhttp.HandlerFor(regOn, promhttp.HandlerOpts{}))
			defer srvOn.Close()
			var got map[string]float64
			deadline := time.Now().Add(20 * time.Second)
			for {
				got = scrape(t, srvOn.URL)
				mismatch := ""
				for k, v := range want {
					if g, ok := got[k]; !ok || g != v {
						mismatch = k
						break
					}
				}
				if mismatch == "" {
					break
				}
				require.True(t, time.Now().Before(deadline), "series %s: want %v, got %v", mismatch, want[mismatch], got[mismatch])
				time.Sleep(20 * time.Millisecond)
			}
			for k := range got {
				if strings.Contains(k, `tenant_id=""`) {
					t.Fatalf("a job without a tenant was counted under an empty tenant: %s", k)
				}
			}
			srvOff := httptest.NewServer(promhttp.HandlerFor(regOff, promhttp.HandlerOpts{}))
			defer srvOff.Close()
			for k := range scrape(t, srvOff.URL) {
				require.NotContains(t, k, "tenant_id", "a series with tenant_id while TenantLabels is off")
			}
		})
	}
}
