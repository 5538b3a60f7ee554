package otelpronto_test

import (
	"context"

	"go.opentelemetry.io/otel"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/otelpronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// Trace every insert and attempt with the application's TracerProvider.
func Example() {
	tr := otelpronto.New(&otelpronto.Options{TracerProvider: otel.GetTracerProvider()})
	cfg := &pronto.Config{}
	tr.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	if err != nil {
		panic(err)
	}
	// The job's meta now carries the enqueue span's traceparent; a worker of any language continues
	// the trace from it.
	_, _ = client.InsertRaw(context.Background(), []pronto.RawJob{{Kind: "email.send", Args: []byte(`["a@example.com"]`)}})
}
