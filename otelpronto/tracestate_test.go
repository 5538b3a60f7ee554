package otelpronto_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/otelpronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// tracedClient is an unstarted client with the tracing middleware (inserts only).
func tracedClient(t *testing.T) (*pronto.Client, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &pronto.Config{}
	otelpronto.New(&otelpronto.Options{TracerProvider: tp}).Instrument(cfg)
	c, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	return c, tp
}

func metaStrings(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// TestMalformedTraceparentDropsTracestate: W3C Trace Context: a tracestate belongs to the trace its
// traceparent names. When InsertMiddleware replaces a malformed meta.traceparent with a new trace's,
// the sender's meta.tracestate goes too; it used to stay beside it, and every OJS worker propagated
// vendor state of another trace.
func TestMalformedTraceparentDropsTracestate(t *testing.T) {
	c, _ := tracedClient(t)
	job, err := c.Insert(context.Background(), traced{N: 1}, &pronto.InsertOpts{Meta: map[string]any{
		"traceparent": "00-ZZZZ-not-a-trace-01",
		"tracestate":  "vendor=opaque-state-of-another-trace",
	}})
	require.NoError(t, err)
	m := metaStrings(t, job.Meta)
	tp, _ := m["traceparent"].(string)
	require.NotEqual(t, "00-ZZZZ-not-a-trace-01", tp, "the malformed traceparent was replaced by the enqueue span's")
	if ts, ok := m["tracestate"]; ok {
		t.Errorf("meta.traceparent was replaced with a new trace (%s) but meta.tracestate %q of the discarded context was kept", tp, ts)
	}
}

// TestOverwrittenTraceparentDropsForeignTracestate: the same when the insert's context has a span
// and meta.traceparent is overwritten with that span's trace.
func TestOverwrittenTraceparentDropsForeignTracestate(t *testing.T) {
	c, tp := tracedClient(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	other := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	job, err := c.Insert(ctx, traced{N: 1}, &pronto.InsertOpts{Meta: map[string]any{
		"traceparent": other,
		"tracestate":  "congo=t61rcWkgMzE",
	}})
	require.NoError(t, err)
	m := metaStrings(t, job.Meta)
	got, _ := m["traceparent"].(string)
	require.NotEqual(t, other, got)
	require.Contains(t, got, span.SpanContext().TraceID().String())
	if ts, ok := m["tracestate"]; ok && span.SpanContext().TraceState().Len() == 0 {
		t.Errorf("meta.traceparent now names trace %s but meta.tracestate %q (of trace 0af7651916cd43dd8448eb211c80319c) was kept", span.SpanContext().TraceID(), ts)
	}
}
