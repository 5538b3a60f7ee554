package pronto

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// jobAttrs returns the slog attributes every log line about a job carries (its id, kind, queue and
// attempt, and its trace_id and span_id when its meta carries a W3C traceparent), followed by extra
// key-value pairs.
func jobAttrs(row *JobRow, extra ...any) []any {
	return append([]any{"job", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt,
		slog.Any("", traceAttrs{meta: row.Meta})}, extra...)
}

// LogAttrs returns the slog attributes of the job whose context ctx is, for the log lines a worker
// writes about it: job (its id), kind, queue and attempt, as pronto's own lines carry them, and
// trace_id and span_id (ojs-observability.md 9.1) of the OpenTelemetry span in ctx (otelpronto's
// process span when its middleware runs), else of the traceparent in the job's meta. Outside a
// job's context it returns only the trace attributes, if any.
//
//	logger.InfoContext(ctx, "imported rows", append(pronto.LogAttrs(ctx), "rows", n)...)
func LogAttrs(ctx context.Context) []any {
	h, ok := ctx.Value(resultKey{}).(*resultHolder)
	if !ok {
		return []any{slog.Any("", traceAttrs{ctx: ctx})}
	}
	row := h.run.row
	return []any{"job", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt,
		slog.Any("", traceAttrs{ctx: ctx, meta: row.Meta})}
}

// traceAttrs resolves, only when a handler writes the line, to the trace_id and span_id of the span
// in ctx, else of the traceparent in meta; to nothing when neither has one. Its key is empty, so
// handlers write its attributes inline.
type traceAttrs struct {
	ctx  context.Context
	meta json.RawMessage
}

// LogValue implements slog.LogValuer.
func (t traceAttrs) LogValue() slog.Value {
	var sc trace.SpanContext
	if t.ctx != nil {
		sc = trace.SpanContextFromContext(t.ctx)
	}
	if !sc.IsValid() {
		sc = metaSpanContext(t.meta)
	}
	if !sc.IsValid() {
		return slog.GroupValue()
	}
	return slog.GroupValue(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
}

// metaSpanContext reads the W3C traceparent ("00-<trace id>-<span id>-<flags>") of a job's meta; the
// zero SpanContext when there is none or it is malformed.
func metaSpanContext(meta json.RawMessage) trace.SpanContext {
	if !bytes.Contains(meta, []byte(`"traceparent"`)) {
		return trace.SpanContext{}
	}
	var m struct {
		Traceparent string `json:"traceparent"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return trace.SpanContext{}
	}
	// W3C Trace Context, as the propagator reads it: version (two hex digits, not ff; version 00
	// has exactly four fields, a later one at least four), trace id, span id, flags (two hex digits).
	parts := strings.Split(m.Traceparent, "-")
	if len(parts) < 4 || !isHex2(parts[0]) || parts[0] == "ff" || (parts[0] == "00" && len(parts) != 4) ||
		!isHex2(parts[3]) {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(parts[2])
	if err != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true})
}

// isHex2 reports whether s is two lowercase hex digits.
func isHex2(s string) bool {
	return len(s) == 2 && isLowerHex(s[0]) && isLowerHex(s[1])
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
