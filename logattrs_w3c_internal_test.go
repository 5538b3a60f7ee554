package pronto

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestMetaTraceparentValidatedLikeW3C: pronto's log lines about a job take trace_id and span_id from
// meta.traceparent (metaSpanContext) only when W3C Trace Context, and the propagator otelpronto
// uses, accept it: otherwise the job's spans start a new trace and the log lines would name a trace
// no span has. Version-00 traceparents with extra fields, bad flags or a non-hex version used to pass.
func TestMetaTraceparentValidatedLikeW3C(t *testing.T) {
	const tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	for _, tp := range []string{
		"00-" + tid + "-" + sid + "-01-extra", // version 00 has exactly four fields
		"00-" + tid + "-" + sid + "-zz",       // flags are two hex digits
		"00-" + tid + "-" + sid + "-1",        // flags are two hex digits
		"0g-" + tid + "-" + sid + "-01",       // version is two hex digits
		"00-" + tid + "-" + sid + "-",         // no flags
		"00-" + tid + "-" + sid + "-01",       // valid
		"00-" + tid + "-" + sid + "-00",       // valid, not sampled
		"01-" + tid + "-" + sid + "-01-later", // a later version may add fields
	} {
		meta, _ := json.Marshal(map[string]string{"traceparent": tp})
		got := metaSpanContext(meta)
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": tp}))
		if got.IsValid() != want.IsValid() {
			t.Errorf("traceparent %q: log attributes read a valid=%v span context (trace %s); W3C/otel propagator: valid=%v",
				tp, got.IsValid(), got.TraceID(), want.IsValid())
		}
	}
}
