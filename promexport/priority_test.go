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
