package otelpronto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/otelpronto"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

type traced struct {
	N int `json:"n"`
}

func (traced) Kind() string { return "trace.job" }

// setup returns a started client whose trace.job worker fails its first attempt when failFirst, and
// the recorder of its spans.
func setup(t *testing.T, failFirst bool) (*pronto.Client, *tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var attempts atomic.Int32
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[traced]) error {
		// The worker's context carries the process span: its own spans are children of it.
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return pronto.Discard(errors.New("no span in the worker's context"))
		}
		if attempts.Add(1) == 1 && failFirst {
			return errors.New("first attempt fails")
		}
		return nil
	}))
	cfg := &pronto.Config{
		Queues:      map[string]pronto.QueueConfig{"traceq": {MaxWorkers: 2}},
		Workers:     workers,
		RetryPolicy: pronto.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
	}
	otelpronto.New(&otelpronto.Options{TracerProvider: tp}).Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	return client, rec, tp.Tracer("test")
}

// waitSpans waits until the recorder holds n spans named name.
func waitSpans(t *testing.T, rec *tracetest.SpanRecorder, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == name {
				got = append(got, s)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans named %q ended, want %d", len(got), name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestInsertToWorkInProcess(t *testing.T) {
	client, rec, tracer := setup(t, true)
	ctx, request := tracer.Start(context.Background(), "request")
	job, err := client.Insert(ctx, traced{N: 1}, &pronto.InsertOpts{Queue: "traceq"})
	require.NoError(t, err)
	request.End()

	enq := waitSpans(t, rec, "traceq enqueue", 1)[0]
	require.Equal(t, trace.SpanKindProducer, enq.SpanKind())
	require.Equal(t, request.SpanContext().SpanID(), enq.Parent().SpanID(), "enqueue span is a child of the caller's span")
	require.Equal(t, request.SpanContext().TraceID(), enq.SpanContext().TraceID())
	a := attrs(enq)
	require.Equal(t, "ojs", a["messaging.system"].AsString())
	require.Equal(t, "publish", a["messaging.operation.type"].AsString())
	require.Equal(t, "traceq", a["messaging.destination.name"].AsString())
	require.Equal(t, job.ID, a["ojs.job.id"].AsString())
	require.Equal(t, "trace.job", a["ojs.job.type"].AsString())

	// The stored meta carries the enqueue span's W3C context.
	var meta map[string]string
	require.NoError(t, json.Unmarshal(job.Meta, &meta))
	require.Equal(t, "00-"+enq.SpanContext().TraceID().String()+"-"+enq.SpanContext().SpanID().String()+"-01", meta["traceparent"])

	procs := waitSpans(t, rec, "traceq process", 2)
	byAttempt := map[int64]sdktrace.ReadOnlySpan{}
	for _, p := range procs {
		byAttempt[attrs(p)["ojs.job.attempt"].AsInt64()] = p
	}
	require.Len(t, byAttempt, 2)
	for attempt, p := range byAttempt {
		require.Equal(t, trace.SpanKindConsumer, p.SpanKind())
		require.Equal(t, enq.SpanContext().TraceID(), p.SpanContext().TraceID(), "attempt %d continues the trace", attempt)
		require.Equal(t, enq.SpanContext().SpanID(), p.Parent().SpanID(), "attempt %d is a child of the enqueue span", attempt)
		require.Len(t, p.Links(), 1)
		require.Equal(t, enq.SpanContext().SpanID(), p.Links()[0].SpanContext.SpanID(), "attempt %d links to the enqueue span", attempt)
		pa := attrs(p)
		require.Equal(t, job.ID, pa["ojs.job.id"].AsString())
		require.Equal(t, "trace.job", pa["ojs.job.type"].AsString())
		require.Equal(t, "traceq", pa["ojs.job.queue"].AsString())
		require.Equal(t, "process", pa["messaging.operation.type"].AsString())
	}
	first, second := byAttempt[1], byAttempt[2]
	require.Equal(t, "failed", attrs(first)["ojs.job.outcome"].AsString())
	require.Equal(t, codes.Error, first.Status().Code)
	require.Equal(t, "first attempt fails", attrs(first)["error.message"].AsString())
	require.Equal(t, "completed", attrs(second)["ojs.job.outcome"].AsString())
	require.Equal(t, "completed", attrs(second)["ojs.job.state"].AsString())
	require.Equal(t, codes.Ok, second.Status().Code)
}

// TestTraceAcrossHTTP: a job enqueued over the OJS HTTP API with a traceparent in its meta (as any
// OJS SDK sends it) continues that trace in a Go worker; a job enqueued from Go hands its trace
// context to an HTTP worker in the fetched job's meta.
func TestTraceAcrossHTTP(t *testing.T) {
	client, rec, _ := setup(t, false)
	srv, err := server.New(server.Config{Client: client})
	require.NoError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	const remoteTrace, remoteSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"type":"trace.job","args":[{"n":2}],"options":{"queue":"traceq"},
		"meta":{"traceparent":"00-` + remoteTrace + `-` + remoteSpan + `-01","tenant":"acme","big":12345678901234567890}}`
	resp, err := http.Post(hs.URL+"/ojs/v1/jobs", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	var created struct {
		Job struct {
			ID   string          `json:"id"`
			Meta json.RawMessage `json:"meta"`
		} `json:"job"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Contains(t, string(created.Job.Meta), `"tenant":"acme"`, "other meta keys are kept")
	require.Contains(t, string(created.Job.Meta), `12345678901234567890`, "other meta values are kept byte for byte")

	enq := waitSpans(t, rec, "traceq enqueue", 1)[0]
	require.Equal(t, remoteTrace, enq.SpanContext().TraceID().String())
	require.Equal(t, remoteSpan, enq.Parent().SpanID().String(), "the enqueue span is a child of the remote caller's span")
	require.True(t, enq.Parent().IsRemote())
	proc := waitSpans(t, rec, "traceq process", 1)[0]
	require.Equal(t, remoteTrace, proc.SpanContext().TraceID().String(), "the Go worker continues the HTTP caller's trace")
	require.Equal(t, enq.SpanContext().SpanID(), proc.Parent().SpanID())
	require.Equal(t, created.Job.ID, attrs(proc)["ojs.job.id"].AsString())

	// The other way: inserted from Go (queue without Go workers), fetched by an HTTP worker.
	ctx := context.Background()
	job, err := client.Insert(ctx, traced{N: 3}, &pronto.InsertOpts{Queue: "remote"})
	require.NoError(t, err)
	fresp, err := http.Post(hs.URL+"/ojs/v1/workers/fetch", "application/json",
		bytes.NewBufferString(`{"queues":["remote"],"worker_id":"py-1"}`))
	require.NoError(t, err)
	var fetched struct {
		Jobs []struct {
			ID   string            `json:"id"`
			Meta map[string]string `json:"meta"`
		} `json:"jobs"`
	}
	require.NoError(t, json.NewDecoder(fresp.Body).Decode(&fetched))
	fresp.Body.Close()
	require.Len(t, fetched.Jobs, 1)
	require.Equal(t, job.ID, fetched.Jobs[0].ID)
	var goEnq sdktrace.ReadOnlySpan
	for _, s := range waitSpans(t, rec, "remote enqueue", 1) {
		goEnq = s
	}
	tp := fetched.Jobs[0].Meta["traceparent"]
	require.Equal(t, "00-"+goEnq.SpanContext().TraceID().String()+"-"+goEnq.SpanContext().SpanID().String()+"-01", tp)
}

type loggedArgs struct{}

func (loggedArgs) Kind() string { return "trace.logged" }

// TestScheduledAtAndLogAttrs: a scheduled job's enqueue span and its process span carry
// ojs.job.scheduled_at; pronto.LogAttrs in the worker names the process span's trace and span ids.
func TestScheduledAtAndLogAttrs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logged := make(chan map[string]any, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[loggedArgs]) error {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).InfoContext(ctx, "work", pronto.LogAttrs(ctx)...)
		var rec map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
			return pronto.Discard(err)
		}
		logged <- rec
		return nil
	}))
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{"sched": {MaxWorkers: 1}}, Workers: workers,
		PollInterval: 20 * time.Millisecond}
	otelpronto.New(&otelpronto.Options{TracerProvider: tp}).Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	job, err := client.Insert(context.Background(), loggedArgs{}, &pronto.InsertOpts{Queue: "sched", Delay: 50 * time.Millisecond})
	require.NoError(t, err)
	want := job.ScheduledAt.UTC().Format(time.RFC3339Nano)
	enq := waitSpans(t, rec, "sched enqueue", 1)[0]
	require.Equal(t, "scheduled", attrs(enq)["ojs.job.state"].AsString())
	require.Equal(t, want, attrs(enq)["ojs.job.scheduled_at"].AsString())
	proc := waitSpans(t, rec, "sched process", 1)[0]
	require.Equal(t, want, attrs(proc)["ojs.job.scheduled_at"].AsString())
	line := <-logged
	require.Equal(t, job.ID, line["job"])
	require.Equal(t, proc.SpanContext().TraceID().String(), line["trace_id"])
	require.Equal(t, proc.SpanContext().SpanID().String(), line["span_id"])
}

type wfStep struct{}

func (wfStep) Kind() string { return "trace.wf" }

type panicky struct{}

func (panicky) Kind() string { return "trace.panic" }

type blocking struct{}

func (blocking) Kind() string { return "trace.block" }

// startTraced starts a client of queue q (one worker) with workers, traced into a new recorder.
func startTraced(t *testing.T, q string, workers *pronto.Workers, maxAttempts int) (*pronto.Client, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{q: {MaxWorkers: 1}}, Workers: workers,
		RetryPolicy: pronto.RetryPolicy{MaxAttempts: maxAttempts}}
	otelpronto.New(&otelpronto.Options{TracerProvider: tp}).Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	return client, rec, tp
}

// TestWorkflowJobsTraced: a workflow's jobs, its callback included, are inserted through the insert
// middleware like any job: one enqueue span each under the inserting span, and each process span in
// the inserting trace.
func TestWorkflowJobsTraced(t *testing.T) {
	ctx := context.Background()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfStep]) error { return nil }))
	client, rec, tp := startTraced(t, "wftrace", workers, 1)

	appCtx, appSpan := tp.Tracer("app").Start(ctx, "app request")
	opts := &pronto.InsertOpts{Queue: "wftrace"}
	w := pronto.NewWorkflow("traced").Add("a", wfStep{}, opts).Add("b", wfStep{}, opts, "a").
		OnComplete(pronto.WorkflowJob{Args: wfStep{}, Opts: opts})
	_, err := client.WorkflowInsert(appCtx, w)
	appSpan.End()
	require.NoError(t, err)

	enqueue := waitSpans(t, rec, "wftrace enqueue", 3)
	require.Len(t, enqueue, 3)
	for _, s := range enqueue {
		require.Equal(t, appSpan.SpanContext().SpanID(), s.Parent().SpanID(), "an enqueue span under the inserting span")
	}
	for _, s := range waitSpans(t, rec, "wftrace process", 3) {
		require.Equal(t, appSpan.SpanContext().TraceID(), s.SpanContext().TraceID(), "job %s runs in the inserting trace",
			attrs(s)[otelpronto.AttrJobID].AsString())
	}
}

// TestPanicSpanIsError: a worker's panic reaches the work middleware as the attempt's *PanicError, so
// its process span records the failure (status Error, outcome, error.type) like any other.
func TestPanicSpanIsError(t *testing.T) {
	ctx := context.Background()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[panicky]) error { panic("boom") }))
	client, rec, _ := startTraced(t, "tracepanic", workers, 1)
	j, err := client.Insert(ctx, panicky{}, &pronto.InsertOpts{Queue: "tracepanic"})
	require.NoError(t, err)

	span := waitSpans(t, rec, "tracepanic process", 1)[0]
	a := attrs(span)
	require.Equal(t, codes.Error, span.Status().Code)
	require.Equal(t, "failed", a[otelpronto.AttrOutcome].AsString())
	require.Equal(t, "*pronto.PanicError", a[otelpronto.AttrErrorType].AsString())
	require.Equal(t, "panic: boom", a[otelpronto.AttrErrorMessage].AsString())
	// The client still recovers it: the job is discarded with a panic in its history.
	require.Eventually(t, func() bool {
		row, err := client.JobGet(ctx, j.ID)
		return err == nil && row.State == pronto.StateDiscarded && len(row.Errors) == 1 && row.Errors[0].Type == "panic"
	}, 20*time.Second, 10*time.Millisecond)
}

// TestStoppedRunSpanOutcome: a run stopped by an operator's cancel or by a shutdown, whose worker
// returns ctx.Err(), is traced with the job's real outcome, as the client's events tell it: cancelled
// (status Error), or interrupted (given back to available, status Unset), never failed.
func TestStoppedRunSpanOutcome(t *testing.T) {
	ctx := context.Background()
	started := make(chan string, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blocking]) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	}))
	client, rec, _ := startTraced(t, "tracestop", workers, 3)
	events, unsub := client.Subscribe(pronto.EventCancelled)
	defer unsub()
	waitStarted := func() string {
		select {
		case id := <-started:
			return id
		case <-time.After(20 * time.Second):
			t.Fatal("the job never started")
			return ""
		}
	}

	j, err := client.Insert(ctx, blocking{}, &pronto.InsertOpts{Queue: "tracestop"})
	require.NoError(t, err)
	waitStarted()
	_, err = client.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	select {
	case e := <-events:
		require.Equal(t, j.ID, e.Job.ID)
	case <-time.After(20 * time.Second):
		t.Fatal("no cancelled event")
	}
	span := waitSpans(t, rec, "tracestop process", 1)[0]
	a := attrs(span)
	require.Equal(t, "cancelled", a[otelpronto.AttrOutcome].AsString())
	require.Equal(t, string(pronto.StateCancelled), a[otelpronto.AttrJobState].AsString())
	require.Equal(t, codes.Error, span.Status().Code)

	j, err = client.Insert(ctx, blocking{}, &pronto.InsertOpts{Queue: "tracestop"})
	require.NoError(t, err)
	waitStarted()
	stopCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_ = client.Stop(stopCtx) // the deadline passes: the run is given back
	span = waitSpans(t, rec, "tracestop process", 2)[1]
	a = attrs(span)
	require.Equal(t, j.ID, a[otelpronto.AttrJobID].AsString())
	require.Equal(t, "interrupted", a[otelpronto.AttrOutcome].AsString())
	require.Equal(t, string(pronto.StateAvailable), a[otelpronto.AttrJobState].AsString())
	require.Equal(t, codes.Unset, span.Status().Code)
	row, err := client.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pronto.StateAvailable, row.State, "given back, as the span says")
}
