package pronto_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testlog"
	"github.com/pronto-jobs/pronto/store/memory"
)

// lockedBuffer is testlog.Buffer, a log sink a logger and a test share.
type lockedBuffer = testlog.Buffer

// TestJobLogAttributes: a log line about a job carries its id, kind, queue and attempt.
func TestJobLogAttributes(t *testing.T) {
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error { return nil }))
	cfg := fastConfig(workers, map[string]pronto.QueueConfig{"logs": {MaxWorkers: 1}})
	cfg.Logger = logger
	c := startClient(t, memory.New(), cfg)
	job, err := c.Insert(context.Background(), echoArgs{}, &pronto.InsertOpts{Queue: "logs"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "attempt ended") }, 15*time.Second, 10*time.Millisecond)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["msg"] != "pronto: attempt ended" {
			continue
		}
		require.Equal(t, job.ID, rec["job"])
		require.Equal(t, "test.echo", rec["kind"])
		require.Equal(t, "logs", rec["queue"])
		require.Equal(t, 1.0, rec["attempt"])
		require.Equal(t, "completed", rec["state"])
		return
	}
	t.Fatalf("no attempt line in %s", buf.String())
}

// TestJobLogTraceAttributes: a log line about a job whose meta carries a W3C traceparent has its
// trace_id and span_id; LogAttrs inside Work gives the job's attributes and the ids of the span in
// the context; a job without trace context logs no trace attributes.
func TestJobLogTraceAttributes(t *testing.T) {
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const traceID, enqueueSpan, workSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "b7ad6b7169203331"
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
		tid, _ := trace.TraceIDFromHex(traceID)
		sid, _ := trace.SpanIDFromHex(workSpan)
		spanCtx := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
		logger.InfoContext(ctx, "from work", pronto.LogAttrs(spanCtx)...)
		return nil
	}))
	cfg := fastConfig(workers, map[string]pronto.QueueConfig{"logs": {MaxWorkers: 1}})
	cfg.Logger = logger
	c := startClient(t, memory.New(), cfg)
	traced, err := c.Insert(context.Background(), echoArgs{}, &pronto.InsertOpts{Queue: "logs",
		Meta: map[string]any{"traceparent": "00-" + traceID + "-" + enqueueSpan + "-01"}})
	require.NoError(t, err)
	waitState(t, c, traced.ID, pronto.StateCompleted)
	plain, err := c.Insert(context.Background(), echoArgs{}, &pronto.InsertOpts{Queue: "logs",
		Meta: map[string]any{"traceparent": "00-not-a-trace-01"}})
	require.NoError(t, err)
	waitState(t, c, plain.ID, pronto.StateCompleted)
	require.Eventually(t, func() bool { return strings.Count(buf.String(), "attempt ended") == 2 }, 15*time.Second, 10*time.Millisecond)

	var ended, work, plainEnded map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		switch {
		case rec["msg"] == "pronto: attempt ended" && rec["job"] == traced.ID:
			ended = rec
		case rec["msg"] == "pronto: attempt ended" && rec["job"] == plain.ID:
			plainEnded = rec
		case rec["msg"] == "from work" && rec["job"] == traced.ID:
			work = rec
		}
	}
	require.NotNil(t, ended)
	require.Equal(t, traceID, ended["trace_id"])
	require.Equal(t, enqueueSpan, ended["span_id"], "outside Work: the span of the job's traceparent")
	require.NotNil(t, work)
	require.Equal(t, "test.echo", work["kind"])
	require.Equal(t, "logs", work["queue"])
	require.Equal(t, 1.0, work["attempt"])
	require.Equal(t, traceID, work["trace_id"])
	require.Equal(t, workSpan, work["span_id"], "inside Work: the span in the context")
	require.NotNil(t, plainEnded)
	require.NotContains(t, plainEnded, "trace_id", "a malformed traceparent logs no trace")
	require.NotContains(t, plainEnded, "span_id")
	require.Empty(t, pronto.LogAttrs(context.Background())[0].(slog.Attr).Value.Resolve().Group(), "no job, no span: nothing")
}
