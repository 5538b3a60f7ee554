package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/eventfilter"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// The events endpoint serves the OJS events of this server process from a bounded in-memory log
// (the newest DefaultEventBuffer events): what it enqueued, what remote workers fetched, heartbeated,
// completed and failed, what the client's own Go workers did (through Client.Subscribe), and what
// cron fired. It is an observation window for dashboards and tests, not a durable log: events of other
// processes, and events older than the buffer, are not in it.

// DefaultEventBuffer is how many events the log keeps by default.
const DefaultEventBuffer = 10000

// event is one OJS event: the CloudEvents-like envelope with its data already encoded.
type event struct {
	seq     uint64 // order in the log; the id is made from it and at
	typ     string
	source  string
	subject string
	at      time.Time
	queue   string
	jobType string
	data    []byte // a JSON object, or nil when form says how to write it

	// form is the shape of the data of the frequent job events (job.enqueued, job.started,
	// job.completed), kept as their fields and written only when the event is read: every enqueue,
	// fetch and ack records one, and few are ever read. subject, jobType and queue are the job's.
	form   eventForm
	n1, n2 int64 // enqueued: priority; started: attempt; completed: attempt, duration_ms
	worker string
	raw    []byte // completed: the result
	trace  string // the job's trace id (traceID), written as trace_id
}

// eventForm names the shape of an event's data kept as fields.
type eventForm uint8

const (
	formData      eventForm = iota // data holds the data
	formEnqueued                   // {job_id, job_type, queue, priority}
	formStarted                    // {job_id, job_type, queue, worker_id, attempt}
	formCompleted                  // {job_id, job_type, queue, duration_ms, attempt, result?}
)

// appendEventData appends e's data object.
func appendEventData(b []byte, e *event) []byte {
	if e.form == formData {
		return append(b, e.data...)
	}
	b = append(b, '{')
	b = appendStringField(b, "job_id", e.subject)
	b = appendStringField(b, "job_type", e.jobType)
	b = appendStringField(b, "queue", e.queue)
	switch e.form {
	case formEnqueued:
		b = appendIntField(b, "priority", e.n1)
	case formStarted:
		b = appendStringField(b, "worker_id", e.worker)
		b = appendIntField(b, "attempt", e.n1)
	case formCompleted:
		b = appendIntField(b, "duration_ms", e.n2)
		b = appendIntField(b, "attempt", e.n1)
		if len(e.raw) > 0 {
			b = appendRawField(b, "result", e.raw)
		}
	}
	if e.trace != "" {
		b = appendStringField(b, "trace_id", e.trace)
	}
	return append(b, '}')
}

// eventLog is a ring of the latest events.
type eventLog struct {
	mu   sync.Mutex
	ring []event
	next int // index of the next write
	full bool
	seq  uint64
	// salt fills the random bits of event ids, so ids differ between processes.
	salt [5]byte
	// changed is closed by the next add, for the event streams waiting for it (follow); nil while
	// none waits, so an add costs nothing more without streams.
	changed chan struct{}
	// onAdd, when set (before the first add), sees each event once recorded, outside the lock: the
	// webhooks' dispatch (webhookapi.go).
	onAdd func(e *event)

	// workflows and workers remember what the workflow and worker events need (workflowevents.go).
	workflows workflowTracker
	workers   workerEvents
}

func newEventLog(size int) *eventLog {
	if size <= 0 {
		size = DefaultEventBuffer
	}
	l := &eventLog{ring: make([]event, size)}
	_, _ = rand.Read(l.salt[:])
	return l
}

// eventID is an event's id: "evt_" and a UUIDv7 whose time is the event's and whose last 48 bits are
// its sequence number in the log, so a cursor names a position in the log.
func (l *eventLog) eventID(e *event) string {
	var b [16]byte
	ms := uint64(e.at.UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | l.salt[0]&0x0f
	b[7] = l.salt[1]
	b[8] = 0x80 | l.salt[2]&0x3f
	b[9] = l.salt[3]
	for i := 0; i < 6; i++ {
		b[10+i] = byte(e.seq >> (40 - 8*i))
	}
	var out [40]byte
	copy(out[:], "evt_")
	hex.Encode(out[4:12], b[0:4])
	out[12] = '-'
	hex.Encode(out[13:17], b[4:6])
	out[17] = '-'
	hex.Encode(out[18:22], b[6:8])
	out[22] = '-'
	hex.Encode(out[23:27], b[8:10])
	out[27] = '-'
	hex.Encode(out[28:40], b[10:16])
	return string(out[:])
}

// parseEventSeq reads the sequence number out of an event id.
func parseEventSeq(id string) (uint64, bool) {
	// The whole id is checked, not only the parts read: an id this server never gave out (a made-up
	// time part, uppercase hex) is no cursor of it.
	if len(id) != 40 || id[:4] != "evt_" || !uuidv7.Valid(id[4:]) {
		return 0, false
	}
	var b [6]byte
	if _, err := hex.Decode(b[:], []byte(id[28:])); err != nil {
		return 0, false
	}
	var seq uint64
	for _, x := range b {
		seq = seq<<8 | uint64(x)
	}
	return seq, true
}

// cursorSeq reads the sequence number out of an event id this log wrote, as a cursor into it. An
// id of another process (another replica, or this server before a restart, whose sequence started
// again) names no position here: taken as one, it would skip this log's events up to its number.
func (l *eventLog) cursorSeq(id string) (uint64, bool) {
	seq, ok := parseEventSeq(id)
	if !ok {
		return 0, false
	}
	// The salt bits eventID writes into bytes 6 to 9 (hex 18:22 and 23:27).
	var b [4]byte
	if _, err := hex.Decode(b[0:2], []byte(id[18:22])); err != nil {
		return 0, false
	}
	if _, err := hex.Decode(b[2:4], []byte(id[23:27])); err != nil {
		return 0, false
	}
	l.mu.Lock()
	last := l.seq
	l.mu.Unlock()
	if b[0] != 0x70|l.salt[0]&0x0f || b[1] != l.salt[1] || b[2] != 0x80|l.salt[2]&0x3f || b[3] != l.salt[3] || seq > last {
		return 0, false
	}
	return seq, true
}

func (l *eventLog) add(e event) {
	if e.at.IsZero() {
		e.at = time.Now()
	}
	l.mu.Lock()
	l.seq++
	e.seq = l.seq
	l.ring[l.next] = e
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	l.mu.Unlock()
	if l.onAdd != nil {
		l.onAdd(&e)
	}
}

func (l *eventLog) reset() {
	l.mu.Lock()
	clear(l.ring)
	l.next, l.full = 0, false
	l.mu.Unlock()
}

// eventFilter selects events; empty lists match everything.
type eventFilter struct {
	types    []string // exact, or a prefix ending in "*"
	queues   []string
	jobTypes []string
	after    uint64 // only events after this sequence number
	limit    int
}

// query returns the oldest events after f.after that match f, at most f.limit, and whether more match.
func (l *eventLog) query(f eventFilter) ([]event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, more, _ := l.queryLocked(f)
	return out, more
}

// queryLocked is query under l.mu; it also returns the sequence number up to which it looked: the
// last event returned when more match, else the latest event of the log.
func (l *eventLog) queryLocked(f eventFilter) (out []event, more bool, through uint64) {
	n, start := l.next, 0
	if l.full {
		n, start = len(l.ring), l.next
	}
	for i := 0; i < n; i++ {
		e := &l.ring[(start+i)%len(l.ring)]
		if e.seq <= f.after {
			continue
		}
		if !eventfilter.Match(f.types, e.typ, true) || !eventfilter.Match(f.queues, e.queue, false) || !eventfilter.Match(f.jobTypes, e.jobType, false) {
			continue
		}
		if len(out) == f.limit {
			return out, true, out[len(out)-1].seq
		}
		out = append(out, *e)
	}
	return out, false, max(l.seq, f.after)
}

// follow is query for a stream: besides the events and whether more match, it returns the sequence
// number to continue after, how many events after f.after the log dropped before they were read
// (overwritten in the ring, or cleared; of any type), and a channel the next add closes.
func (l *eventLog) follow(f eventFilter) (evs []event, more bool, through, missed uint64, next <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest := l.seq + 1 // the sequence number of the oldest event held
	if l.full {
		oldest = l.ring[l.next].seq
	} else if l.next > 0 {
		oldest = l.ring[0].seq
	}
	if f.after+1 < oldest {
		missed = oldest - 1 - f.after
	}
	evs, more, through = l.queryLocked(f)
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return evs, more, through, missed, l.changed
}

// latest returns the sequence number of the latest event.
func (l *eventLog) latest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

func (l *eventLog) appendEvent(b []byte, e *event) []byte {
	b = append(b, '{')
	b = appendStringField(b, "specversion", "1.0")
	b = appendStringField(b, "id", l.eventID(e))
	b = appendStringField(b, "type", e.typ)
	b = appendStringField(b, "source", e.source)
	b = appendTimeField(b, "time", e.at)
	if e.subject != "" {
		b = appendStringField(b, "subject", e.subject)
	}
	b = appendStringField(b, "datacontenttype", "application/json")
	b = appendEventData(appendKey(b, "data"), e)
	return append(b, '}')
}

// jobEvent records a job event whose data starts with job_type and queue; more adds the rest, and
// the job's trace_id ends it when it has one.
func (s *Server) jobEvent(typ string, j *pronto.JobRow, at time.Time, more func(b []byte) []byte) {
	s.order.add(s.jobEventData(typ, j, at, more), s.events)
}

// jobEventData builds the job event jobEvent records.
func (s *Server) jobEventData(typ string, j *pronto.JobRow, at time.Time, more func(b []byte) []byte) event {
	s.streams.wake(j)
	b := make([]byte, 0, 256)
	b = append(b, '{')
	b = appendStringField(b, "job_id", j.ID)
	b = appendStringField(b, "job_type", j.Kind)
	b = appendStringField(b, "queue", j.Queue)
	if more != nil {
		b = more(b)
	}
	if tid := traceID(j.Meta); tid != "" {
		b = appendStringField(b, "trace_id", tid)
	}
	b = append(b, '}')
	return event{typ: typ, source: s.source, subject: j.ID, at: at, queue: j.Queue, jobType: j.Kind, data: b}
}

// jobEventForm records a job event whose data e's form and fields give (see event).
func (s *Server) jobEventForm(typ string, j *pronto.JobRow, at time.Time, e event) {
	s.order.add(s.jobEventOf(typ, j, at, e), s.events)
}

// jobEventOf completes e, the job event jobEventForm records.
func (s *Server) jobEventOf(typ string, j *pronto.JobRow, at time.Time, e event) event {
	s.streams.wake(j)
	e.typ, e.source, e.subject, e.at, e.queue, e.jobType = typ, s.source, j.ID, at, j.Queue, j.Kind
	e.trace = traceID(j.Meta)
	return e
}

// consumeClientEvents turns the client's events into OJS events until ch is closed.
func (s *Server) consumeClientEvents(ch <-chan *pronto.Event) {
	defer close(s.eventsDone)
	for ev := range ch {
		s.clientEvent(ev)
	}
}

func (s *Server) clientEvent(ev *pronto.Event) {
	if ev.Tenant != nil {
		s.tenantEvent(ev)
		return
	}
	if ev.Limit != nil {
		s.rateLimitEvent(ev)
		return
	}
	if ev.Worker != nil {
		// The client's own Go workers stopped (its Stop, as the server shuts down): their worker
		// id is the client's.
		s.workerStopped(ev.Worker.ID, ev.Worker.Reason, ev.Worker.Queues, ev.Worker.JobsCompleted, ev.Worker.Uptime, ev.At)
		return
	}
	j := ev.Job
	if j == nil {
		return
	}
	if ev.Kind == pronto.EventRescued {
		// Its lease ran out: back to available, as a requeue nack would put it (ojs-events.md 3.1).
		s.reenqueuedEvent(j, ev.At)
		return
	}
	if j.WorkflowID != "" {
		defer s.workflowJobEvent(ev) // after the step's job events (workflowevents.go)
	}
	if ev.Kind == pronto.EventDeadLetterPruned {
		// ojs-dead-letter.md 8.1: the count of jobs removed, per queue.
		b := appendStringField([]byte{'{'}, "queue", j.Queue)
		b = appendIntField(b, "count", int64(ev.Count))
		if ev.Archived {
			b = append(b, `,"archived":true`...) // pruning_policy archive (8.2)
		}
		b = append(b, '}')
		s.events.add(event{typ: "dead_letter.pruned", source: s.source, subject: j.Queue, at: ev.At, queue: j.Queue, data: b})
		return
	}
	s.enqueuedFirst(j) // a Go worker of this client may finish a job before its insert here returns
	if ev.Kind == pronto.EventDiscarded && errors.Is(ev.Err, pronto.ErrJobExpired) {
		s.expiredEvent(j, ev.At)
		return
	}
	if ev.Kind == pronto.EventDiscarded && errors.Is(ev.Err, pronto.ErrRateLimitDropped) {
		s.rateDroppedEvent(j, ev)
		return
	}
	s.streams.wake(j)
	durMS := ev.Duration.Milliseconds()
	var lastErr *pronto.AttemptError
	if n := len(j.Errors); n > 0 {
		lastErr = &j.Errors[n-1]
	}
	appendErr := func(b []byte, key string) []byte {
		if lastErr == nil {
			b = appendKey(b, key)
			msg := "unknown error"
			if ev.Err != nil {
				msg = ev.Err.Error()
			}
			b = append(b, '{')
			b = appendStringField(b, "code", "handler_error")
			b = appendStringField(b, "message", msg)
			b = appendBoolField(b, "retryable", false)
			return append(b, '}')
		}
		return appendAttemptError(appendKey(b, key), lastErr)
	}
	switch ev.Kind {
	case pronto.EventCompleted:
		s.recordOutcome(ev, false)
		s.jobEventForm("job.completed", j, ev.At, event{form: formCompleted, n1: int64(j.Attempt), n2: durMS, raw: j.Result})
	case pronto.EventFailed:
		s.recordOutcome(ev, true)
		s.jobEvent("job.failed", j, ev.At, func(b []byte) []byte {
			b = appendIntField(b, "attempt", int64(j.Attempt))
			b = appendErr(b, "error")
			return appendIntField(b, "duration_ms", durMS)
		})
		s.jobEvent("job.retrying", j, ev.At, func(b []byte) []byte {
			b = appendIntField(b, "attempt", int64(j.Attempt))
			b = appendIntField(b, "max_attempts", int64(j.MaxAttempts))
			b = appendTimeField(b, "next_retry_at", j.ScheduledAt)
			return appendErr(b, "error")
		})
	case pronto.EventDiscarded:
		if lastErr != nil && lastErr.Attempt == j.Attempt && j.Attempt > 0 {
			s.recordOutcome(ev, true)
			s.jobEvent("job.failed", j, ev.At, func(b []byte) []byte {
				b = appendIntField(b, "attempt", int64(j.Attempt))
				b = appendErr(b, "error")
				return appendIntField(b, "duration_ms", durMS)
			})
		}
		s.jobEvent("job.discarded", j, ev.At, func(b []byte) []byte {
			b = appendIntField(b, "total_attempts", int64(j.Attempt))
			return appendErr(b, "last_error")
		})
		if isDeadLetter(j) {
			s.deadLetterEvent("dead_letter.added", j)
		}
	case pronto.EventCancelled:
		s.jobEvent("job.cancelled", j, ev.At, nil)
	case pronto.EventSnoozed:
		s.jobEvent("job.scheduled", j, ev.At, func(b []byte) []byte {
			return appendTimeField(b, "scheduled_at", j.ScheduledAt)
		})
	case pronto.EventRetried:
		s.jobEventForm("job.enqueued", j, ev.At, event{form: formEnqueued, n1: int64(j.Priority)})
	case pronto.EventPriorityChanged:
		s.jobEvent("priority.changed", j, ev.At, priorityChangedData(ev.PreviousPriority, j.Priority))
	case pronto.EventProgressStalled:
		// ojs-progress.md 11.1: {job_id, last_progress, last_update}.
		s.jobEvent("progress.stalled", j, ev.At, func(b []byte) []byte {
			if p := j.Progress; p != nil {
				if p.Value != nil {
					b = strconv.AppendFloat(appendKey(b, "last_progress"), *p.Value, 'f', -1, 64)
				} else {
					b = appendRawField(b, "last_progress", []byte("null"))
				}
				if len(p.Data) > 0 {
					b = appendRawField(b, "last_data", p.Data)
				}
				b = appendTimeField(b, "last_update", p.UpdatedAt)
			}
			return b
		})
	case pronto.EventProgressCompleted:
		// ojs-progress.md 11.1: {job_id, progress, duration}; duration_ms like job.completed's.
		s.jobEvent("progress.completed", j, ev.At, func(b []byte) []byte {
			b = strconv.AppendFloat(appendKey(b, "progress"), 1, 'f', -1, 64)
			b = appendIntField(b, "duration_ms", durMS)
			if p := j.Progress; p != nil && len(p.Data) > 0 {
				b = appendRawField(b, "data", p.Data)
			}
			return b
		})
	case pronto.EventProgress:
		// ojs-progress.md 11.1; the client emits at most one a second per job.
		s.jobEvent("progress.updated", j, ev.At, func(b []byte) []byte {
			if p := j.Progress; p != nil {
				if p.Value != nil {
					b = strconv.AppendFloat(appendKey(b, "progress"), *p.Value, 'f', -1, 64)
				}
				if len(p.Data) > 0 {
					b = appendRawField(b, "data", p.Data)
				}
			}
			return b
		})
	}
}

// expiredEvent records job.expired (ojs-events.md 4.1) of a job discarded because its expires_at
// passed before it started, not job.discarded: no attempt of it failed. It is in the dead letter
// queue as every discarded job is, so dead_letter.added follows, as for job.discarded.
func (s *Server) expiredEvent(j *pronto.JobRow, at time.Time) {
	s.jobEvent("job.expired", j, at, func(b []byte) []byte {
		b = appendTimeField(b, "created_at", j.CreatedAt)
		b = appendTimeField(b, "expired_at", at)
		// The TTL as configured: expires_at is an absolute deadline, counted from the job's creation.
		return appendIntField(b, "ttl_ms", max(j.ExpiresAt.Sub(j.CreatedAt).Milliseconds(), 0))
	})
	if isDeadLetter(j) {
		s.deadLetterEvent("dead_letter.added", j)
	}
}

// rateDroppedEvent records what a claim did to a job it dropped for its rate limit (on_limit
// "drop"): rate_limit.dropped (ojs-rate-limiting.md 11.1: key, job_id, job_type), then
// job.discarded, without job.failed: no attempt of it ran, whatever attempt an earlier run reached.
// It is in the dead letter queue as every discarded job is, so dead_letter.added follows.
func (s *Server) rateDroppedEvent(j *pronto.JobRow, ev *pronto.Event) {
	b := append(make([]byte, 0, 128), '{')
	b = appendStringField(b, "key", j.RateKey)
	b = appendStringField(b, "job_id", j.ID)
	b = appendStringField(b, "job_type", j.Kind)
	b = appendStringField(b, "queue", j.Queue)
	if tid := traceID(j.Meta); tid != "" {
		b = appendStringField(b, "trace_id", tid)
	}
	b = append(b, '}')
	s.order.add(event{typ: "rate_limit.dropped", source: s.source, subject: j.ID, at: ev.At, queue: j.Queue,
		jobType: j.Kind, data: b}, s.events)
	s.jobEvent("job.discarded", j, ev.At, func(b []byte) []byte {
		b = appendIntField(b, "total_attempts", int64(j.Attempt))
		if n := len(j.Errors); n > 0 {
			return appendAttemptError(appendKey(b, "last_error"), &j.Errors[n-1])
		}
		b = appendKey(b, "last_error")
		b = append(b, '{')
		b = appendStringField(b, "code", "rate_limited")
		b = appendStringField(b, "message", ev.Err.Error())
		b = appendBoolField(b, "retryable", false)
		return append(b, '}')
	})
	if isDeadLetter(j) {
		s.deadLetterEvent("dead_letter.added", j)
	}
}

// rateLimitEvent records rate_limit.exceeded (ojs-rate-limiting.md 11.1: key, strategy, limit,
// current) when a claim of this server's client finds a rate key limited that it did not see limited
// before, and rate_limit.released (key, strategy, job_id; and job_type, queue) when a job of such a
// key next starts through it with the key left not limited: one pair per episode, not one event per
// job held back (pronto.EventRateLimitExceeded).
func (s *Server) rateLimitEvent(ev *pronto.Event) {
	h := ev.Limit
	b := append(make([]byte, 0, 128), '{')
	b = appendStringField(b, "key", h.Key)
	b = appendStringField(b, "strategy", h.Strategy)
	e := event{source: s.source, subject: h.Key, at: ev.At}
	switch {
	case ev.Kind == pronto.EventRateLimitExceeded:
		e.typ = "rate_limit.exceeded"
		b = appendIntField(b, "limit", int64(h.Limit))
		b = appendIntField(b, "current", h.Current)
	case ev.Kind == pronto.EventRateLimitReleased && ev.Job != nil:
		j := ev.Job
		e.typ, e.subject, e.queue, e.jobType = "rate_limit.released", j.ID, j.Queue, j.Kind
		b = appendStringField(b, "job_id", j.ID)
		b = appendStringField(b, "job_type", j.Kind)
		b = appendStringField(b, "queue", j.Queue)
	default:
		return
	}
	e.data = append(b, '}')
	s.events.add(e)
}

// onCronFire records the cron events of one occurrence.
func (s *Server) onCronFire(f pronto.CronFire) {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	b = appendStringField(b, "cron_name", f.Name)
	b = appendStringField(b, "cron_expr", f.Expression)
	b = appendTimeField(b, "scheduled_at", f.ScheduledAt)
	// job_type is required in both (ojs-events.md 4.5): a skipped occurrence names the job it did
	// not insert.
	typ, queue, kind := "cron.triggered", f.Queue, f.Kind
	b = appendStringField(b, "job_type", f.Kind)
	if f.Skipped {
		typ = "cron.skipped"
		// ojs-cron.md 9.2 allows three reasons only: an occurrence its template's unique policy
		// refused is an overlap with the job holding the key, told apart by pronto's own field.
		if f.SkipReason == pronto.CronSkipUnique {
			b = appendStringField(b, "reason", string(pronto.CronSkipOverlap))
			b = appendBoolField(b, "unique_conflict", true)
		} else {
			b = appendStringField(b, "reason", string(f.SkipReason))
		}
		b = appendStringField(b, "existing_job_id", f.PreviousJobID)
	} else if f.Job != nil {
		queue, kind = f.Job.Queue, f.Job.Kind
		b = appendStringField(b, "job_id", f.Job.ID)
	}
	b = append(b, '}')
	s.events.add(event{typ: typ, source: s.source + "/cron", subject: f.Name, queue: queue, jobType: kind, data: b})
	if f.Job != nil {
		s.enqueuedEvent(f.Job)
	}
}

// onCronInsert marks the job an occurrence is about to insert as being inserted here (enqueueOrder);
// the returned func forgets it, after OnFire recorded its job.enqueued.
func (s *Server) onCronInsert(jobID string) func() {
	ids := []string{jobID}
	s.order.begin(ids)
	return func() { s.order.end(ids) }
}

// enqueuedEvent counts an inserted job as enqueued in the stats history and records its
// job.enqueued (or job.scheduled, for a job due later; nothing for a pending one).
// A fetch of the job that came first has recorded job.enqueued already (enqueueOrder).
func (s *Server) enqueuedEvent(j *pronto.JobRow) {
	s.history.record(statEnqueued, j.Queue, j.CreatedAt, 0)
	s.order.inserted(j.ID, s.events, func() (event, bool) {
		switch j.State {
		case pronto.StateScheduled:
			return s.jobEventData("job.scheduled", j, j.CreatedAt, func(b []byte) []byte {
				return appendTimeField(b, "scheduled_at", j.ScheduledAt)
			}), true
		case pronto.StateAvailable:
			return s.jobEventOf("job.enqueued", j, j.CreatedAt, event{form: formEnqueued, n1: int64(j.Priority)}), true
		}
		return event{}, false
	})
}

// reenqueuedEvent records job.enqueued of a job that enters the available state at at after its
// insert (a pending job activated, a job its worker handed back with a requeue nack): the event is
// due on every entry (ojs-events.md 3.1), but the insert counted the job in the stats history.
func (s *Server) reenqueuedEvent(j *pronto.JobRow, at time.Time) {
	if j.State == pronto.StateAvailable {
		s.jobEventForm("job.enqueued", j, at, event{form: formEnqueued, n1: int64(j.Priority)})
	}
}

// throttleView is the OJS view of a tenant's throttle (ojs-multi-tenancy.md §9.2).
func throttleView(th *pronto.TenantThrottle) map[string]any {
	v := map[string]any{
		"tenant_id":        th.Tenant,
		"reason":           th.Reason,
		"action":           th.Action,
		"original_weight":  th.OriginalWeight,
		"effective_weight": th.EffectiveWeight,
		"since":            th.Since.UTC().Format(time.RFC3339Nano),
		"until":            th.Until.UTC().Format(time.RFC3339Nano),
		"value":            th.Value,
		"threshold":        th.Threshold,
	}
	if th.Action == pronto.ThrottleConcurrencyReduced {
		orig := 0 // none
		if th.OriginalLimit != nil {
			orig = th.OriginalLimit.MaxActive
		}
		v["original_max_concurrency"] = orig
		if th.EffectiveLimit != nil {
			v["effective_max_concurrency"] = th.EffectiveLimit.MaxActive
		}
	}
	if th.Overridden {
		v["overridden"] = true
	}
	return v
}

// releaseView is the OJS view of a throttle's release.
func releaseView(rel *pronto.TenantThrottleRelease) map[string]any {
	v := throttleView(&rel.TenantThrottle)
	v["cause"] = rel.Cause
	v["weight"] = rel.Weight
	if rel.Action == pronto.ThrottleConcurrencyReduced {
		mc := 0 // none
		if rel.Limit != nil {
			mc = rel.Limit.MaxActive
		}
		v["max_concurrency"] = mc
	}
	v["kept"] = rel.Kept
	return v
}

// tenantEvent records the tenant events of ojs-multi-tenancy.md §11.1 that the client emits:
// tenant.throttled and tenant.throttle_released (this client as the maintenance leader, or a reset
// through it) and tenant.created (a tenant configured through it for the first time).
func (s *Server) tenantEvent(ev *pronto.Event) {
	te := ev.Tenant
	var data map[string]any
	switch ev.Kind {
	case pronto.EventTenantThrottled:
		if te.Throttle == nil {
			return
		}
		data = throttleView(te.Throttle)
	case pronto.EventTenantThrottleReleased:
		if te.Release == nil {
			return
		}
		data = releaseView(te.Release)
	case pronto.EventTenantCreated:
		data = map[string]any{"tenant_id": te.Tenant, "setting": te.Setting}
	default:
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		return
	}
	s.events.add(event{typ: string(ev.Kind), source: s.source, subject: te.Tenant, at: ev.At, data: b})
}
