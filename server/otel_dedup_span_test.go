package server

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/otelpronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestDeduplicatedEnqueueSpanNamesExistingJob: an enqueue a unique key deduplicates (200,
// "deduplicated": true) answers the existing job, so its enqueue span's ojs.job.id and
// messaging.message.id (ojs-observability.md §7.1) name that job, not the id drawn for the job that
// was never inserted; ojs.job.duplicate marks it.
func TestDeduplicatedEnqueueSpanNamesExistingJob(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &pronto.Config{}
	otelpronto.New(&otelpronto.Options{TracerProvider: tp}).Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	body := map[string]any{"type": "span.dedup", "args": []any{"same"}, "options": map[string]any{
		"queue": "spandedup", "unique": map[string]any{"keys": []string{"type", "args"}, "on_conflict": "ignore"}}}
	first := call(t, s, "POST", "/ojs/v1/jobs", body)
	if first.status != 201 {
		t.Fatalf("first enqueue: %d %s", first.status, first.raw)
	}
	second := call(t, s, "POST", "/ojs/v1/jobs", body)
	if second.status != 200 || second.body["deduplicated"] != true {
		t.Fatalf("second enqueue: %d %s", second.status, second.raw)
	}
	existing := second.body["job"].(map[string]any)["id"].(string)
	if id := first.body["job"].(map[string]any)["id"]; id != existing {
		t.Fatalf("the deduplicated enqueue answers job %s, want the first one, %s", existing, id)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "spandedup enqueue" {
			spans = append(spans, sp)
		}
	}
	if len(spans) != 2 {
		t.Fatalf("%d enqueue spans, want 2", len(spans))
	}
	attrs := map[string]string{}
	for _, kv := range spans[1].Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for _, key := range []string{string(otelpronto.AttrJobID), string(otelpronto.AttrMessageID)} {
		if attrs[key] != existing {
			t.Errorf("the deduplicated enqueue's span has %s = %q; the answer names job %s", key, attrs[key], existing)
		}
	}
	if attrs["ojs.job.duplicate"] != "true" {
		t.Errorf("the deduplicated enqueue's span has ojs.job.duplicate = %q, want true", attrs["ojs.job.duplicate"])
	}
}
