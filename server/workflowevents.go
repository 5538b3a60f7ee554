package server

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Workflow events (ojs-events.md §3.5, §4.4) and worker events (§3.4, §4.3) of the event window.
//
// The workflow events follow the outcomes of workflow steps and callbacks that this server's client
// reports (the acks and nacks of OJS workers, and its own Go workers), as the job events do. A step's
// outcome or a callback's end costs at most one read of its workflow (store.GetWorkflow: its name,
// its member and callback counts and its derived state), and the first fetch of a workflow's steps
// one more; jobs outside workflows cost nothing. What the window remembers of each workflow
// (started, finished, the step that failed it) is held in memory for the latest workflowRecords
// workflows. The worker events cost no read: they come from what fetches and heartbeats carry.

const (
	// workflowRecords bounds the workflows the window remembers. A workflow forgotten while it runs
	// (more than this many seen since) may have its workflow.started recorded again.
	workflowRecords = 10000
	// workflowFinishWait is how long the finish of a workflow waits for the outcome of a step the
	// store already counts but this window has not reported yet (see workflowFinish).
	workflowFinishWait = 2 * time.Second
	// workflowReadTimeout bounds the read of a workflow made for a client event (no request bounds it).
	workflowReadTimeout = 5 * time.Second
	// workersHeardMax bounds the worker ids the window remembers; past it they are all forgotten (and
	// each one's next contact records worker.started again).
	workersHeardMax = 100000
	// workerHeartbeatEventEvery is how often a worker's unchanged heartbeats are recorded as
	// worker.heartbeat: recording each one (SDKs beat every few seconds) let an idle fleet's
	// heartbeats push every job event out of the window.
	workerHeartbeatEventEvery = time.Minute
)

// workflowTracker remembers, per workflow, what the window has recorded of it. The zero value is ready.
type workflowTracker struct {
	mu   sync.Mutex
	recs map[string]*list.Element // of *workflowRecord
	lru  list.List                // most recently used first
}

// workflowRecord is what the window recorded of one workflow. Its mu is held across the workflow's
// read and the events it records, so that one workflow's events are recorded in the order of its
// reads.
type workflowRecord struct {
	id string

	mu      sync.Mutex
	started bool // workflow.started recorded
	done    bool // workflow.completed or workflow.failed recorded, or the workflow was cancelled
	// completed and discarded count the member outcomes the window reported.
	completed, discarded int
	// failed is the first member the window saw discarded: the step workflow.failed names.
	failed *event
	// pending is a finish held back by workflowFinish, recorded by the next outcome or by timer.
	pending *event
	timer   *time.Timer
}

// get returns the record of workflow id, making one (and forgetting the least recently used one
// beyond workflowRecords) if needed.
func (t *workflowTracker) get(id string) *workflowRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.recs[id]; ok {
		t.lru.MoveToFront(el)
		return el.Value.(*workflowRecord)
	}
	if t.recs == nil {
		t.recs = map[string]*list.Element{}
	}
	rec := &workflowRecord{id: id}
	t.recs[id] = t.lru.PushFront(rec)
	if t.lru.Len() > workflowRecords {
		old := t.lru.Back()
		t.lru.Remove(old)
		delete(t.recs, old.Value.(*workflowRecord).id)
	}
	return rec
}

// isStep reports whether j is a member of a workflow (a step, not a callback: callbacks are not
// counted among a workflow's steps).
func isStep(j *pronto.JobRow) bool {
	return j != nil && j.WorkflowID != "" && j.RunOn == ""
}

// workflowName is the name workflow events give wf: its name, or its id when it has none (the
// workflow_name field is required).
func workflowName(wf *store.Workflow) string {
	if wf.Name != "" {
		return wf.Name
	}
	return wf.ID
}

// stepName is the step_id of a workflow step: the id or name it was created with over HTTP (a dag
// step's name, a chain step's given id), else its job id (the Go API keeps no step names with the
// jobs).
func stepName(j *pronto.JobRow) string {
	if _, ext := splitMeta(j.Meta); ext != nil && ext.Step != "" {
		return ext.Step
	}
	return j.ID
}

// workflowEvent builds a workflow event of wf whose data starts with workflow_id and
// workflow_name; more adds the rest. queue and kind are those of the step it is about, if any, so
// that the queue and job type filters of GET /ojs/v1/events can select it.
func (s *Server) workflowEvent(typ string, wf *store.Workflow, at time.Time, queue, kind string, more func([]byte) []byte) *event {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	b = appendStringField(b, "workflow_id", wf.ID)
	b = appendStringField(b, "workflow_name", workflowName(wf))
	b = more(b)
	b = append(b, '}')
	if at.IsZero() {
		at = time.Now()
	}
	return &event{typ: typ, source: s.source, subject: wf.ID, at: at, queue: queue, jobType: kind, data: b}
}

// workflowStarted records workflow.started for wf unless rec already has it. at is when the step
// that starts it began. Called with rec.mu held.
func (s *Server) workflowStarted(rec *workflowRecord, wf *store.Workflow, at time.Time) {
	if rec.started {
		return
	}
	rec.started = true
	s.events.add(*s.workflowEvent("workflow.started", wf, at, "", "", func(b []byte) []byte {
		return appendIntField(b, "total_steps", int64(wf.Total))
	}))
}

// workflowStarts records workflow.started for the workflows of the steps a fetch handed out, the
// first time the window sees a step of each begin. It reads each such workflow once (for its name
// and step count); a fetch of jobs outside workflows does nothing.
func (s *Server) workflowStarts(ctx context.Context, jobs []*pronto.JobRow) {
	for _, j := range jobs {
		if !isStep(j) {
			continue
		}
		rec := s.events.workflows.get(j.WorkflowID)
		rec.mu.Lock()
		if !rec.started {
			if wf, err := s.store.GetWorkflow(ctx, j.WorkflowID); err == nil {
				s.workflowStarted(rec, wf, j.StartedAt)
			} else {
				// Left to the step's outcome, which reads the workflow again.
				s.log.Debug("pronto serve: reading a workflow for its events failed", "workflow_id", j.WorkflowID, "err", err)
			}
		}
		rec.mu.Unlock()
	}
}

// workflowQueueSize bounds the step outcomes waiting for their workflow events. The queue keeps
// the workflow reads off the goroutine that consumes the client's events: a slow read held every
// other job's events back until the client's subscription overflowed and dropped them.
const workflowQueueSize = 10000

// isCallback reports whether j is a workflow callback.
func isCallback(j *pronto.JobRow) bool {
	return j != nil && j.WorkflowID != "" && j.RunOn != ""
}

// workflowJobEvent hands a step's outcome, or a callback's end, to the goroutine that records its
// workflow events (runWorkflowEvents), without waiting. With that goroutine this far behind, the
// outcome's workflow events are dropped (logged), never the job events of other jobs.
func (s *Server) workflowJobEvent(ev *pronto.Event) {
	switch {
	case isStep(ev.Job):
	case isCallback(ev.Job):
		// A workflow with callbacks finishes when they have (ojs-workflows.md §9.4): their ends are
		// what may finish it.
		if ev.Kind != pronto.EventCompleted && ev.Kind != pronto.EventDiscarded && ev.Kind != pronto.EventCancelled {
			return
		}
	default:
		return
	}
	select {
	case s.workflowQueue <- ev:
	default:
		s.log.Warn("pronto serve: workflow events dropped: their store reads are too slow", "workflow_id", ev.Job.WorkflowID, "job_id", ev.Job.ID)
	}
}

// runWorkflowEvents records the workflow events of the step outcomes queued by workflowJobEvent,
// in order, until the queue is closed (Close).
func (s *Server) runWorkflowEvents() {
	defer close(s.workflowDone)
	for ev := range s.workflowQueue {
		if isCallback(ev.Job) {
			s.recordWorkflowCallbackEvent(ev)
			continue
		}
		s.recordWorkflowJobEvent(ev)
	}
}

// readWorkflowForEvents reads workflow id for the events of one of its jobs' outcome, within
// workflowReadTimeout; a failed read is logged, and the events it would have brought are not recorded.
func (s *Server) readWorkflowForEvents(id string) (*store.Workflow, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), workflowReadTimeout)
	defer cancel()
	wf, err := s.store.GetWorkflow(ctx, id)
	if err != nil {
		s.log.Warn("pronto serve: reading a workflow for its events failed", "workflow_id", id, "err", err)
		return nil, false
	}
	return wf, true
}

// recordWorkflowCallbackEvent records what the end of a workflow's callback (completed, discarded or
// cancelled) brings: workflow.completed or workflow.failed when it was the last job the workflow
// waited for. A callback discarded fails its workflow (ojs-workflows.md §9.5): workflow.failed names
// it, unless a step failed it before.
func (s *Server) recordWorkflowCallbackEvent(ev *pronto.Event) {
	j := ev.Job
	rec := s.events.workflows.get(j.WorkflowID)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.done {
		return
	}
	wf, ok := s.readWorkflowForEvents(j.WorkflowID)
	if !ok {
		return
	}
	if ev.Kind == pronto.EventDiscarded && rec.failed == nil {
		code, msg := stepError(ev)
		cb := callbackType(j)
		rec.failed = s.workflowEvent("workflow.failed", wf, ev.At, j.Queue, j.Kind, func(b []byte) []byte {
			b = appendStringField(b, "failed_step_id", stepID(j, 0))
			b = appendStringField(b, "failed_step_type", j.Kind)
			b = appendStringField(b, "callback", cb)
			b = append(appendKey(b, "error"), '{')
			b = appendStringField(b, "code", code)
			b = appendStringField(b, "message", msg)
			return append(b, '}')
		})
	}
	s.workflowFinish(rec, wf, ev.At)
}

// recordWorkflowJobEvent records the workflow events that a step's outcome, reported by the client, brings:
// workflow.started (when the window has not seen the workflow begin: a step run by a Go worker, whose
// start the server does not follow, as that would cost every job), workflow.step_completed, and
// workflow.completed or workflow.failed. It is called after the step's own job events.
func (s *Server) recordWorkflowJobEvent(ev *pronto.Event) {
	j := ev.Job
	begun := j.Attempt > 0 // the step ran (an expired or cancelled-before-start step did not)
	rec := s.events.workflows.get(j.WorkflowID)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch ev.Kind {
	case pronto.EventCompleted, pronto.EventDiscarded:
	case pronto.EventCancelled:
		// A cancel can finish a workflow only as failed by a step seen failing, or let a finish held
		// back go: else no read (a workflow cancel reports every job it cancelled).
		if (rec.failed == nil || rec.done) && rec.pending == nil && (rec.started || !begun) {
			return
		}
	case pronto.EventFailed, pronto.EventSnoozed:
		if rec.started || !begun {
			return
		}
	default:
		return
	}
	wf, ok := s.readWorkflowForEvents(j.WorkflowID)
	if !ok {
		return
	}
	if begun {
		at := j.StartedAt
		if at.IsZero() {
			at = ev.At
		}
		s.workflowStarted(rec, wf, at)
	}
	switch ev.Kind {
	case pronto.EventCompleted:
		rec.completed++
		dur := ev.Duration.Milliseconds()
		s.events.add(*s.workflowEvent("workflow.step_completed", wf, ev.At, j.Queue, j.Kind, func(b []byte) []byte {
			b = appendStringField(b, "step_id", stepName(j))
			b = appendStringField(b, "step_type", j.Kind)
			b = appendIntField(b, "duration_ms", dur)
			// As the store counts them when the report is handled: steps that completed since
			// (whose reports follow) are not counted, so two steps completing together may both
			// say the lower number. Counting the reports instead would be wrong for the steps
			// whose outcomes go through another process.
			return appendIntField(b, "steps_remaining", int64(max(wf.Total-wf.Counts[store.StateCompleted], 0)))
		}))
	case pronto.EventDiscarded:
		rec.discarded++
		if rec.failed == nil {
			code, msg := stepError(ev)
			rec.failed = s.workflowEvent("workflow.failed", wf, ev.At, j.Queue, j.Kind, func(b []byte) []byte {
				b = appendStringField(b, "failed_step_id", stepName(j))
				b = appendStringField(b, "failed_step_type", j.Kind)
				b = append(appendKey(b, "error"), '{')
				b = appendStringField(b, "code", code)
				b = appendStringField(b, "message", msg)
				return append(b, '}')
			})
		}
	}
	s.workflowFinish(rec, wf, ev.At)
}

// stepError is the code and message of the error that discarded a step: its last attempt's error,
// else what the client reported.
func stepError(ev *pronto.Event) (code, msg string) {
	j := ev.Job
	if n := len(j.Errors); n > 0 && (ev.Err == nil || j.Errors[n-1].Attempt == j.Attempt) {
		code, _, _ = errorCode(&j.Errors[n-1])
		return code, j.Errors[n-1].Message
	}
	switch {
	case errors.Is(ev.Err, pronto.ErrJobExpired):
		return "expired", ev.Err.Error()
	case ev.Err != nil:
		return "handler_error", ev.Err.Error()
	}
	return "handler_error", "unknown error"
}

// workflowFinish records workflow.completed or workflow.failed once wf, as just read, has finished
// that way: its steps and its callbacks all ended (store.DeriveWorkflowState), so a workflow with
// callbacks finishes with the last of them. Called with rec.mu held.
//
// A step's outcome is reported after its commit, so the read made for one step may already count
// another that finished at the same moment, whose report follows: when the store counts more
// completed (or discarded) steps than the window reported, the finish waits for those reports, so
// that no workflow.step_completed follows the workflow's finish; it is recorded anyway after
// workflowFinishWait, for a step whose outcome went through another process (and is in that
// process's window, not this one).
func (s *Server) workflowFinish(rec *workflowRecord, wf *store.Workflow, at time.Time) {
	if rec.done {
		return
	}
	var fin *event
	switch wf.State {
	case store.WorkflowCompleted:
		dur := wf.FinishedAt.Sub(wf.CreatedAt)
		if wf.FinishedAt.IsZero() {
			dur = at.Sub(wf.CreatedAt)
		}
		fin = s.workflowEvent("workflow.completed", wf, at, "", "", func(b []byte) []byte {
			b = appendIntField(b, "total_steps", int64(wf.Total))
			return appendIntField(b, "duration_ms", max(dur.Milliseconds(), 0))
		})
	case store.WorkflowFailed:
		if rec.failed == nil {
			// Failed by steps cancelled, or discarded through another process: no step failure this
			// window saw to name.
			return
		}
		fin = rec.failed
		fin.at = at
	case store.WorkflowCancelled:
		rec.done, rec.pending = true, nil
		rec.stop()
		return
	default:
		return
	}
	if wf.Counts[store.StateCompleted] > rec.completed || wf.Counts[store.StateDiscarded] > rec.discarded {
		rec.pending = fin
		if rec.timer == nil {
			rec.timer = time.AfterFunc(workflowFinishWait, func() {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				if !rec.done && rec.pending != nil {
					s.events.add(*rec.pending)
					rec.done, rec.pending = true, nil
				}
			})
		}
		return
	}
	s.events.add(*fin)
	rec.done, rec.pending = true, nil
	rec.stop()
}

// stop stops the timer of a finish held back. Called with rec.mu held.
func (rec *workflowRecord) stop() {
	if rec.timer != nil {
		rec.timer.Stop()
		rec.timer = nil
	}
}

// workerEvents remembers the OJS workers the window has heard from. The zero value is ready.
type workerEvents struct {
	mu   sync.Mutex
	seen map[string]*workerHeard
	// every is the least time between two recorded heartbeats of a worker whose active count and
	// answered state did not change (0: every heartbeat is recorded).
	every time.Duration
}

// workerHeard is what the window knows of one worker.
type workerHeard struct {
	queues  []string // of its latest fetch
	quiet   bool     // a heartbeat answered "quiet" last
	stopped bool     // worker.stopped recorded
	// beatAt, beatActive and beatState are those of the last heartbeat recorded.
	beatAt     time.Time
	beatActive int
	beatState  string
}

// workerContact notes that OJS worker id was heard from (a fetch naming queues, or a heartbeat with
// none), and records worker.started the first time this process hears from it. It reads nothing:
// whether another server, or this one before a restart, heard from the worker is not asked, as
// that would cost the first contact a read of the worker's record.
func (s *Server) workerContact(id string, queues []string) {
	if id == "" {
		return
	}
	t := &s.events.workers
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil || len(t.seen) >= workersHeardMax {
		t.seen = map[string]*workerHeard{}
	}
	if h, ok := t.seen[id]; ok && h.stopped && len(queues) > 0 {
		// A fetch after worker.stopped: the worker was started again under the same id (SDKs that
		// take the host name do so), so it is a new run, with its worker.started and, in time, its
		// own worker.stopped. Only a fetch counts: a repeated last heartbeat is still the old run's.
		delete(t.seen, id)
	} else if ok {
		if len(queues) > 0 && !slices.Equal(h.queues, queues) {
			h.queues = slices.Clone(queues)
		}
		return
	}
	t.seen[id] = &workerHeard{queues: slices.Clone(queues)}
	b := append(make([]byte, 0, 128), '{')
	b = appendStringField(b, "worker_id", id)
	b = appendStrings(appendKey(b, "queues"), nonNil(queues))
	b = append(b, '}')
	// Added with t.mu held, so that no other event of the worker comes before it.
	s.events.add(event{typ: "worker.started", source: s.source, subject: id, data: b})
}

// nonNil is ss, or an empty list for nil (written [] rather than null).
func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// workerHeartbeat records worker.heartbeat for a heartbeat of OJS worker id answered state, and
// worker.quiet when that answer is the first "quiet" since the worker last ran. active is the count
// of jobs the worker holds; memoryMB and cpuPercent are the JSON numbers it sent, or nil.
func (s *Server) workerHeartbeat(id, state string, active int, memoryMB, cpuPercent json.RawMessage) {
	if id == "" {
		return
	}
	t := &s.events.workers
	t.mu.Lock()
	if t.seen == nil {
		t.seen = map[string]*workerHeard{}
	}
	h := t.seen[id]
	if h == nil {
		h = &workerHeard{} // forgotten since its contact (workersHeardMax)
		t.seen[id] = h
	}
	queues := nonNil(h.queues)
	quiet := state == "quiet" && !h.quiet
	switch state {
	case "running":
		h.quiet = false
	case "quiet":
		h.quiet = true
	}
	now := time.Now()
	record := t.every <= 0 || h.beatAt.IsZero() || now.Sub(h.beatAt) >= t.every ||
		active != h.beatActive || state != h.beatState
	if record {
		h.beatAt, h.beatActive, h.beatState = now, active, state
	}
	t.mu.Unlock()
	if !record && !quiet {
		return
	}
	b := append(make([]byte, 0, 128), '{')
	b = appendStringField(b, "worker_id", id)
	b = appendIntField(b, "active_jobs", int64(active))
	b = appendStrings(appendKey(b, "queues"), queues)
	if memoryMB != nil {
		b = appendRawField(b, "memory_mb", memoryMB)
	}
	if cpuPercent != nil {
		b = appendRawField(b, "cpu_percent", cpuPercent)
	}
	b = append(b, '}')
	s.events.add(event{typ: "worker.heartbeat", source: s.source, subject: id, data: b})
	if quiet {
		b := append(make([]byte, 0, 64), '{')
		b = appendStringField(b, "worker_id", id)
		b = appendIntField(b, "active_jobs", int64(active))
		b = append(b, '}')
		s.events.add(event{typ: "worker.quiet", source: s.source, subject: id, data: b})
	}
}

// workerStopped records worker.stopped (ojs-events.md 4.3: worker_id, reason; and queues, and
// jobs_completed and uptime_ms when known, jobsCompleted < 0 and uptime 0 when not) of worker id,
// once: an OJS worker that reported "terminate" with no job left (its last heartbeat before it
// exits, ojs-worker-protocol.md 2.3), or the client's own Go workers at its Stop.
func (s *Server) workerStopped(id, reason string, queues []string, jobsCompleted int64, uptime time.Duration, at time.Time) {
	if id == "" {
		return
	}
	t := &s.events.workers
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[string]*workerHeard{}
	}
	h := t.seen[id]
	if h == nil {
		h = &workerHeard{queues: slices.Clone(queues)}
		t.seen[id] = h
	}
	if h.stopped {
		return
	}
	h.stopped = true
	if queues == nil {
		queues = h.queues
	}
	b := append(make([]byte, 0, 128), '{')
	b = appendStringField(b, "worker_id", id)
	b = appendStringField(b, "reason", reason)
	b = appendStrings(appendKey(b, "queues"), nonNil(queues))
	if jobsCompleted >= 0 {
		b = appendIntField(b, "jobs_completed", jobsCompleted)
	}
	if uptime > 0 {
		b = appendIntField(b, "uptime_ms", uptime.Milliseconds())
	}
	b = append(b, '}')
	// Added with t.mu held, so that it comes after the worker's other events.
	s.events.add(event{typ: "worker.stopped", source: s.source, subject: id, at: at, data: b})
}
