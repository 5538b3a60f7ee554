package promexport_test

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/store/memory"
)

// Export a client's metrics on the application's own registry.
func Example() {
	m := promexport.New(nil)
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{"default": {MaxWorkers: 10}}, Workers: pronto.NewWorkers()}
	m.Instrument(cfg) // counts inserts
	client, err := pronto.NewClient(memory.New(), cfg)
	if err != nil {
		panic(err)
	}
	detach := m.Attach(client) // outcomes from events; gauges at scrape time
	defer detach()

	registry := prometheus.NewRegistry()
	registry.MustRegister(m)
	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))

	_ = client.Start(context.Background())
	defer client.Stop(context.Background())
}
