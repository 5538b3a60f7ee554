package promexport_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/promexport"
)

// TestPriorityChangesMetric: on every store, each priority change (priority.changed) counts once in
// pronto_priority_changes_total of the job's queue; a refused change (a cancelled job) counts
// nothing.
func TestPriorityChangesMetric(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m := promexport.New(nil)
			cfg := &pronto.Config{}
			m.Instrument(cfg)
			client, err := pronto.NewClient(openStore(t, kind), cfg)
			require.NoError(t, err)
			defer m.Attach(client)()
			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(m))
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()

			insert := func(queue string) string {
				j, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: queue})
				require.NoError(t, err)
				return j.ID
			}
			set := func(id string, p int) {
				_, _, err := client.JobSetPriority(ctx, id, p)
				require.NoError(t, err)
			}
			a1, a2, b := insert("prio-a"), insert("prio-a"), insert("prio-b")
			set(a1, pronto.PriorityHigh)
			set(a1, pronto.PriorityLow)
			set(b, 42)
			waitSeries(t, srv.URL, map[string]float64{
				`pronto_priority_changes_total{queue="prio-a"}`: 2,
				`pronto_priority_changes_total{queue="prio-b"}`: 1,
			})

			_, err = client.JobCancel(ctx, a2)
			require.NoError(t, err)
			_, _, err = client.JobSetPriority(ctx, a2, 5)
			require.ErrorIs(t, err, pronto.ErrInvalidTransition)
			// Events arrive in order: once this later change is counted, a count of the refused one
			// would be too.
			set(b, 1)
			waitSeries(t, srv.URL, map[string]float64{`pronto_priority_changes_total{queue="prio-b"}`: 2})
			require.Equal(t, 2.0, scrape(t, srv.URL)[`pronto_priority_changes_total{queue="prio-a"}`], "a refused change counts nothing")
		})
	}
}

// TestPriorityMetrics: with Options.PriorityLabels, ojs_queue_available_by_priority gives each
// queue's available jobs per priority (not scheduled ones), and follows a cancel; without it there
// is no such series. On every store.
func TestPriorityMetrics(t *testing.T) {
	for _, kind := range teststore.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			on := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond, PriorityLabels: true})
			off := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			require.NoError(t, err)
			defer on.Attach(client)()
			defer off.Attach(client)()
			regOn, regOff := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
			require.NoError(t, regOn.Register(on))
			require.NoError(t, regOff.Register(off))
			srvOn := httptest.NewServer(promhttp.HandlerFor(regOn, promhttp.HandlerOpts{}))
			defer srvOn.Close()
			srvOff := httptest.NewServer(promhttp.HandlerFor(regOff, promhttp.HandlerOpts{}))
			defer srvOff.Close()

			var low *pronto.JobRow
			for _, o := range []*pronto.InsertOpts{
				{Priority: 10}, {Priority: 10}, {}, {Queue: "mail", Priority: -3},
				{Priority: 50, ScheduledAt: time.Now().Add(time.Hour)},
			} {
				r, err := client.Insert(ctx, okArgs{}, o)
				require.NoError(t, err)
				if o.Queue == "mail" {
					low = r
				}
			}
			byPriority := func(url string) map[string]float64 {
				out := map[string]float64{}
				for k, v := range scrape(t, url) {
					if strings.HasPrefix(k, "ojs_queue_available_by_priority{") {
						out[k] = v
					}
				}
				return out
			}
			require.Equal(t, map[string]float64{
				`ojs_queue_available_by_priority{priority="10",queue="default"}`: 2,
				`ojs_queue_available_by_priority{priority="0",queue="default"}`:  1,
				`ojs_queue_available_by_priority{priority="-3",queue="mail"}`:    1,
			}, byPriority(srvOn.URL))
			require.Empty(t, byPriority(srvOff.URL), "the series while PriorityLabels is off")

			_, err = client.JobCancel(ctx, low.ID)
			require.NoError(t, err)
			require.Equal(t, map[string]float64{
				`ojs_queue_available_by_priority{priority="10",queue="default"}`: 2,
				`ojs_queue_available_by_priority{priority="0",queue="default"}`:  1,
			}, byPriority(srvOn.URL), "a queue without available jobs has no series")
		})
	}
}
