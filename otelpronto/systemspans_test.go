package otelpronto_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/otelpronto"
	"github.com/pronto-jobs/pronto/store"
)

// openStore opens a fresh, migrated store of the given kind, closed when the test ends.
func openStore(t *testing.T, kind string) store.Store { return teststore.Open(t, kind) }

// TestSystemSpans: on every store, with Options.SystemSpans the leader's passes make INTERNAL spans
// named as ojs-observability.md 6.3 names them; the scheduler poll that made a scheduled job
// available counts it; a cron occurrence makes an "ojs.cron trigger" span with the schedule's name,
// parent of the enqueue span of the job it inserted.
func TestSystemSpans(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			cfg := &pronto.Config{RescueInterval: 50 * time.Millisecond, LeaderTTL: 300 * time.Millisecond}
			otelpronto.New(&otelpronto.Options{TracerProvider: tp, SystemSpans: true}).Instrument(cfg)
			client, err := pronto.NewClient(openStore(t, kind), cfg)
			require.NoError(t, err)
			require.NoError(t, client.Start(ctx))
			t.Cleanup(func() { _ = client.Stop(context.Background()) })
			cronCtx, stopCron := context.WithCancel(ctx)
			cronDone := make(chan struct{})
			go func() {
				defer close(cronDone)
				_ = client.RunCron(cronCtx, nil)
			}()
			t.Cleanup(func() { stopCron(); <-cronDone })

			_, err = client.InsertOJS(ctx, []pronto.OJSJob{{Kind: "sys.later", Args: json.RawMessage(`[]`), Opts: pronto.InsertOpts{
				Queue: "sysq", ScheduledAt: time.Now().Add(200 * time.Millisecond)}}})
			require.NoError(t, err)
			_, err = client.CronRegister(ctx, pronto.CronJob{Name: "every-second", Expression: "@every 1s", Kind: "sys.cron",
				Opts: pronto.InsertOpts{Queue: "sysq"}})
			require.NoError(t, err)

			waitSpans(t, rec, "ojs.reaper check", 1)
			deadline := time.Now().Add(20 * time.Second)
			for {
				promoted := false
				for _, s := range waitSpans(t, rec, "ojs.scheduler poll", 1) {
					require.Equal(t, trace.SpanKindInternal, s.SpanKind())
					require.Equal(t, "ojs", attrs(s)[otelpronto.AttrMessagingSystem].AsString())
					if attrs(s)[otelpronto.AttrSystemJobs].AsInt64() >= 1 {
						promoted = true
					}
				}
				if promoted {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no scheduler poll span counted the promoted job")
				}
				time.Sleep(20 * time.Millisecond)
			}
			trig := waitSpans(t, rec, "ojs.cron trigger", 1)[0]
			require.Equal(t, "every-second", attrs(trig)[otelpronto.AttrCronName].AsString())
			require.Equal(t, trace.SpanKindInternal, trig.SpanKind())
			found := false
			for _, s := range waitSpans(t, rec, "sysq enqueue", 1) {
				if s.Parent().SpanID() == trig.SpanContext().SpanID() {
					found = true
				}
			}
			require.True(t, found, "the cron job's enqueue span is a child of its trigger span")
		})
	}
}
