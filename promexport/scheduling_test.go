package promexport_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestSchedulingSeries: the scheduling series of ojs-fair-scheduling.md §11.2 as a scrape shows them:
// dispatches by queue and pool, waits, the last minute's shares, starvation counts, and the
// utilization of the pools with a concurrency bound (none for a pool without one).
func TestSchedulingSeries(t *testing.T) {
	ctx := context.Background()
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	// Before Attach: the series fed by the server, no utilization.
	m.ObserveDispatch("a", "p", 2*time.Second)
	m.ObserveDispatch("a", "p", 0)
	m.ObserveDispatch("a", "", 0)
	m.ObserveDispatch("b", "", -time.Second) // a clock step: counted as no wait
	m.ObserveStarvation("b", "p")
	got := scrape(t, srv.URL)
	require.Equal(t, 2.0, got[`ojs_scheduling_dispatch_total{pool="p",queue="a"}`])
	require.Equal(t, 1.0, got[`ojs_scheduling_dispatch_total{pool="",queue="a"}`])
	require.Equal(t, 1.0, got[`ojs_scheduling_dispatch_total{pool="",queue="b"}`])
	require.Equal(t, 0.75, got[`ojs_scheduling_dispatch_ratio{queue="a"}`])
	require.Equal(t, 0.25, got[`ojs_scheduling_dispatch_ratio{queue="b"}`])
	require.Equal(t, 3.0, got[`ojs_scheduling_queue_wait_duration_seconds_count{queue="a"}`])
	require.Equal(t, 2.0, got[`ojs_scheduling_queue_wait_duration_seconds_sum{queue="a"}`])
	require.Equal(t, 0.0, got[`ojs_scheduling_queue_wait_duration_seconds_sum{queue="b"}`])
	require.Equal(t, 1.0, got[`ojs_scheduling_starvation_events_total{queue="b"}`])

	client, err := pronto.NewClient(memory.New(), nil)
	require.NoError(t, err)
	detach := m.Attach(client)
	defer detach()
	require.NoError(t, client.PoolSet(ctx, pronto.WorkerPool{Name: "p", Queues: []string{"a", "b"}, Concurrency: 4}))
	require.NoError(t, client.PoolSet(ctx, pronto.WorkerPool{Name: "free", Queues: []string{"a"}}))
	got = scrape(t, srv.URL)
	require.Contains(t, got, `ojs_scheduling_pool_utilization{pool="p"}`)
	require.Equal(t, 0.0, got[`ojs_scheduling_pool_utilization{pool="p"}`])
	require.NotContains(t, got, `ojs_scheduling_pool_utilization{pool="free"}`)
}
