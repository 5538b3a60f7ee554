// Package otelpronto traces pronto jobs with OpenTelemetry, as ojs-observability.md specifies: an
// insert starts a PRODUCER span ("{queue} enqueue") per job and stores its W3C trace context in the
// job's meta (meta.traceparent, meta.tracestate); each attempt runs in a CONSUMER span
// ("{queue} process") that is a child of, and linked to, the span in the job's meta.
//
// Because the context travels in meta, the trace crosses languages: a job enqueued over the OJS HTTP
// API with meta.traceparent set by another SDK continues that trace in a Go worker, and a job
// enqueued from Go continues its trace in an OJS worker written in any language.
//
//	tr := otelpronto.New(nil) // the global TracerProvider, W3C trace context
//	cfg := &pronto.Config{...}
//	tr.Instrument(cfg)
//	client, err := pronto.NewClient(st, cfg)
//
// The package uses only the OpenTelemetry API; the application installs the SDK and exporter.
package otelpronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pronto-jobs/pronto"
)

// ScopeName is the instrumentation scope of the tracer this package uses.
const ScopeName = "github.com/pronto-jobs/pronto/otelpronto"

// Attribute keys, named as ojs-observability.md section 7 names them. AttrOutcome is pronto's: the
// attempt's outcome as the client's events tell it (completed, failed, snoozed, cancelled,
// discarded; interrupted when a shutdown gave the job back, lost when the client lost its lease),
// with the state it leads to in AttrJobState when that is certain (a failure's depends on the
// retry policy).
const (
	AttrMessagingSystem      = attribute.Key("messaging.system")
	AttrMessagingOperation   = attribute.Key("messaging.operation.type")
	AttrMessagingDestination = attribute.Key("messaging.destination.name")
	AttrMessageID            = attribute.Key("messaging.message.id")
	AttrJobID                = attribute.Key("ojs.job.id")
	AttrJobType              = attribute.Key("ojs.job.type")
	AttrJobQueue             = attribute.Key("ojs.job.queue")
	AttrJobState             = attribute.Key("ojs.job.state")
	AttrJobAttempt           = attribute.Key("ojs.job.attempt")
	AttrJobPriority          = attribute.Key("ojs.job.priority")
	AttrJobScheduledAt       = attribute.Key("ojs.job.scheduled_at")
	AttrWorkerID             = attribute.Key("ojs.worker.id")
	AttrErrorType            = attribute.Key("error.type")
	AttrErrorMessage         = attribute.Key("error.message")
	AttrErrorAttempt         = attribute.Key("ojs.job.error.attempt")
	AttrOutcome              = attribute.Key("ojs.job.outcome")
)

// Options configures a Tracing. The zero value (or nil) uses the global TracerProvider and the W3C
// trace-context propagator.
type Options struct {
	// TracerProvider makes the tracer (default otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the context in meta (default propagation.TraceContext: the
	// traceparent and tracestate keys the OJS spec names).
	Propagator propagation.TextMapPropagator
	// SystemSpans makes Instrument install SystemHook too: an INTERNAL span per housekeeping pass
	// (ojs-observability.md 6.3). Off by default: the leader runs about three passes a second.
	SystemSpans bool
}

// Tracing holds the tracer and propagator the middleware use.
type Tracing struct {
	tracer      trace.Tracer
	prop        propagation.TextMapPropagator
	systemSpans bool
}

// New returns a Tracing with opts (nil: defaults).
func New(opts *Options) *Tracing {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	return &Tracing{tracer: o.TracerProvider.Tracer(ScopeName), prop: o.Propagator, systemSpans: o.SystemSpans}
}

// Instrument appends the insert and work middleware to cfg, and sets cfg.SystemHook when
// Options.SystemSpans is set. Call it before NewClient.
func (t *Tracing) Instrument(cfg *pronto.Config) {
	cfg.InsertMiddleware = append(cfg.InsertMiddleware, t.InsertMiddleware())
	cfg.WorkMiddleware = append(cfg.WorkMiddleware, t.WorkMiddleware())
	if t.systemSpans {
		cfg.SystemHook = t.SystemHook()
	}
}

// Attributes of system spans (pronto's names: the OJS spec names none for them).
const (
	AttrSystemJobs = attribute.Key("ojs.system.jobs") // jobs the pass moved or deleted
	AttrCronName   = attribute.Key("ojs.cron.name")   // the schedule of an ojs.cron trigger span
)

// SystemHook returns a pronto.SystemHook that wraps each housekeeping pass in an INTERNAL span
// named as ojs-observability.md 6.3 names it ("ojs.scheduler poll", "ojs.reaper check", "ojs.cron
// trigger"; "pronto.retention cleanup" for retention), with messaging.system "ojs", the jobs the
// pass moved or deleted (ojs.system.jobs) and, for a cron trigger, ojs.cron.name. A failed pass
// records its error and an Error status. The cron trigger's context carries the span, so the span
// of the job it inserts (with the insert middleware) is its child.
func (t *Tracing) SystemHook() pronto.SystemHook {
	return func(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
		kv := []attribute.KeyValue{AttrMessagingSystem.String("ojs")}
		if p.Name != "" {
			kv = append(kv, AttrCronName.String(p.Name))
		}
		ctx, span := t.tracer.Start(ctx, string(p.Op), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv...))
		return ctx, func(n int, err error) {
			if p.Op != pronto.SystemOpCronTrigger {
				span.SetAttributes(AttrSystemJobs.Int(n))
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}

// InsertMiddleware starts a PRODUCER span per job and writes its trace context into the job's meta.
// Its parent is the span in ctx or, when ctx has none, the trace context already in the job's meta
// (a job enqueued over HTTP by another SDK), so the trace goes on unbroken. The span covers the insert
// call: inside the application's transaction (InsertTx, InsertSQLTx) it ends before the transaction
// does, so a rolled-back insert has one too, and no process span follows it.
func (t *Tracing) InsertMiddleware() pronto.InsertMiddleware {
	return func(ctx context.Context, params []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
		spans := make([]trace.Span, len(params))
		for i, p := range params {
			meta := decodeMeta(p.Meta)
			parent := ctx
			if !trace.SpanContextFromContext(ctx).IsValid() && meta != nil {
				parent = t.prop.Extract(ctx, carrier(meta))
			}
			_, span := t.tracer.Start(parent, p.Queue+" enqueue", trace.WithSpanKind(trace.SpanKindProducer),
				trace.WithAttributes(jobAttrs("publish", p.ID, p.Kind, p.Queue, p.Priority)...))
			spans[i] = span
			if meta == nil {
				if len(p.Meta) > 0 && string(p.Meta) != "null" {
					continue // not an object: leave it untouched (insert validation names the problem)
				}
				meta = map[string]json.RawMessage{}
			}
			// A tracestate belongs to the traceparent beside it: the one written now carries its own
			// (when it has one), and a sender's must not outlive the context it came with.
			delete(meta, "tracestate")
			c := carrier(meta)
			t.prop.Inject(trace.ContextWithSpan(ctx, span), c)
			if b, err := json.Marshal(meta); err == nil {
				p.Meta = b
			}
		}
		rows, err := next(ctx, params)
		for i, span := range spans {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "insert failed")
			} else if i < len(rows) && rows[i] != nil {
				span.SetAttributes(AttrJobState.String(string(rows[i].State)))
				if rows[i].State == pronto.StateScheduled && !rows[i].ScheduledAt.IsZero() {
					span.SetAttributes(AttrJobScheduledAt.String(rows[i].ScheduledAt.UTC().Format(time.RFC3339Nano)))
				}
				if rows[i].Duplicate {
					span.SetAttributes(attribute.Bool("ojs.job.duplicate", true))
				}
				if id := rows[i].ID; id != "" && id != params[i].ID {
					// A deduplicated insert answers the job that already held the unique key: the
					// span names that one, not the id drawn for a job that was never stored.
					span.SetAttributes(AttrMessageID.String(id), AttrJobID.String(id))
				}
			}
			span.End()
		}
		return rows, err
	}
}

// WorkMiddleware runs each attempt in a CONSUMER span, child of and linked to the span whose context
// the job's meta carries, with the job's id, type, queue and attempt, and the attempt's outcome.
func (t *Tracing) WorkMiddleware() pronto.WorkMiddleware {
	return func(ctx context.Context, job *pronto.JobRow, next func(ctx context.Context) error) error {
		var opts []trace.SpanStartOption
		parent := ctx
		if meta := decodeMeta(job.Meta); meta != nil {
			parent = t.prop.Extract(ctx, carrier(meta))
			if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		attrs := append(jobAttrs("process", job.ID, job.Kind, job.Queue, job.Priority), AttrJobAttempt.Int(job.Attempt))
		if job.WorkerID != "" {
			attrs = append(attrs, AttrWorkerID.String(job.WorkerID))
		}
		if !job.ScheduledAt.IsZero() {
			attrs = append(attrs, AttrJobScheduledAt.String(job.ScheduledAt.UTC().Format(time.RFC3339Nano)))
		}
		opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		spanCtx, span := t.tracer.Start(parent, job.Queue+" process", opts...)
		defer span.End()
		err := next(spanCtx)
		// The run's cause decides before the error, as it does for the client's events: a job
		// cancelled while running is cancelled whatever its worker returned (ctx.Err(), mostly).
		cause := context.Cause(ctx)
		outcome, state := outcomeOf(err, cause)
		span.SetAttributes(AttrOutcome.String(outcome))
		if state != "" {
			span.SetAttributes(AttrJobState.String(state))
		}
		switch outcome {
		case "completed", "snoozed":
			span.SetStatus(codes.Ok, "")
		case "interrupted":
			// Given back by a shutdown, the attempt refunded: not the job's failure.
		default:
			reason := err
			if reason == nil {
				reason = cause // cancelled or lost after its worker returned nil
			}
			span.SetAttributes(AttrErrorType.String(fmt.Sprintf("%T", innermost(reason))), AttrErrorMessage.String(reason.Error()),
				AttrErrorAttempt.Int(job.Attempt))
			span.SetStatus(codes.Error, outcome)
		}
		return err
	}
}

// outcomeOf names what an attempt's outcome is, from its run context's cause and its error as the
// client decides it, and the state it leads to when that is certain.
func outcomeOf(err, cause error) (outcome, state string) {
	var snooze *pronto.SnoozeError
	var cancel *pronto.CancelError
	var discard *pronto.DiscardError
	switch {
	case errors.Is(cause, pronto.ErrJobCancelled):
		return "cancelled", string(pronto.StateCancelled) // an operator's cancel
	case errors.Is(cause, pronto.ErrJobLost):
		return "lost", "" // no outcome recorded here: the rescuer decides
	case err == nil:
		return "completed", string(pronto.StateCompleted)
	case errors.Is(cause, pronto.ErrShutdown):
		return "interrupted", string(pronto.StateAvailable)
	case errors.As(err, &snooze):
		return "snoozed", string(pronto.StateScheduled)
	case errors.As(err, &cancel):
		return "cancelled", string(pronto.StateCancelled)
	case errors.As(err, &discard):
		return "discarded", string(pronto.StateDiscarded)
	}
	return "failed", "" // retryable or discarded, as the retry policy decides
}

// innermost unwraps err to the error its wrappers describe, so error.type names a class, not fmt's.
func innermost(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func jobAttrs(op, id, kind, queue string, priority int) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrMessagingSystem.String("ojs"), AttrMessagingOperation.String(op), AttrMessagingDestination.String(queue),
		AttrMessageID.String(id), AttrJobID.String(id), AttrJobType.String(kind), AttrJobQueue.String(queue),
		AttrJobPriority.Int(priority),
	}
}

// decodeMeta returns a job's meta as a map of raw values (so that the values it does not touch are
// written back byte for byte), or nil when it is empty or not a JSON object.
func decodeMeta(raw json.RawMessage) map[string]json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil
	}
	return m
}

// carrier reads and writes trace-context keys as the string values of a job's meta.
type carrier map[string]json.RawMessage

func (c carrier) Get(key string) string {
	var s string
	if json.Unmarshal(c[key], &s) != nil {
		return "" // absent, or not a string
	}
	return s
}

func (c carrier) Set(key, value string) {
	b, _ := json.Marshal(value) // a string always encodes
	c[key] = b
}

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
