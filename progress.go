package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/store"
)

// JobProgress is what the worker of a job's latest run reported about how far it got
// (ojs-progress.md): JobRow.Progress, filled in by JobGet.
type JobProgress = store.Progress

// EventProgress: a worker's progress report on a job was written (at most one a second per job).
// Job.Progress is the job's progress as the store keeps it: the attempt's highest value (a lower
// report is ignored) with the report's data.
const EventProgress EventKind = "job.progress"

// EventProgressStalled: an active job that reported progress has reported none for
// Config.ProgressStallTimeout (ojs-progress.md 11.1, progress.stalled). Job.Progress is the last
// progress reported (UpdatedAt: when). Emitted once per silence; a new report re-arms it.
const EventProgressStalled EventKind = "job.progress_stalled"

// EventProgressCompleted: a job whose completing attempt reported progress (a value or data) completed
// (ojs-progress.md 11.1, progress.completed). It follows the attempt's EventCompleted; Job.Progress
// reads 1 with the last data reported, and Duration is the attempt's run time. For an OJS worker's
// ack it needs one more store read, made only while someone subscribes to it.
const EventProgressCompleted EventKind = "job.progress_completed"

// EventCheckpointSaved: a checkpoint (SaveCheckpoint, or a remote report carrying one) was written;
// Job.LastCheckpoint is the checkpoint saved. Subscribe to it to measure checkpoint sizes.
const EventCheckpointSaved EventKind = "job.checkpoint_saved"

// ProgressInterval is the least time between two progress writes of one job: reports that come
// faster are merged, and the latest is written when the interval has passed (or, at the latest,
// before the attempt's outcome), so a chatty worker cannot flood the store.
const ProgressInterval = time.Second

// MaxProgressDataBytes bounds the encoded data of one progress report (ojs-progress.md recommends
// staying under 4 KiB).
const MaxProgressDataBytes = 64 << 10

// ReportProgress reports how far the job whose context ctx is has got: value from 0 to 1 (clamped;
// a value lower than one reported before in this attempt is ignored), and data, when not nil, any
// value that encodes as a JSON object ({"rows": 1400}). JobGet and GET /ojs/v1/jobs/{id}/progress show
// it, and a completed job's progress reads 1. Call it from Work as often as convenient: writes are
// throttled to one per ProgressInterval, and a failed write is logged, never returned (progress is
// advisory). The error says only that the call was made outside a job or with bad arguments.
func ReportProgress(ctx context.Context, value float64, data any) error {
	if math.IsNaN(value) {
		return fmt.Errorf("%w: progress value is NaN", ErrInvalidArgs)
	}
	v := min(max(value, 0), 1)
	return reportProgress(ctx, &v, data)
}

// ReportProgressData reports structured progress only (see ReportProgress), keeping the numeric value.
func ReportProgressData(ctx context.Context, data any) error {
	if data == nil {
		return fmt.Errorf("%w: progress data is nil", ErrInvalidArgs)
	}
	return reportProgress(ctx, nil, data)
}

// SaveCheckpoint saves v, any value that encodes as a JSON object ({"offset": 14000}), as the
// checkpoint of the job whose context ctx is: the state from which a later attempt can resume
// (ojs-progress.md 6.4), read there with LastCheckpoint. A checkpoint is kept across attempts until
// a newer one replaces it, and after the job ends. It travels with progress reports, so it is
// throttled like them: saved within ProgressInterval and, at the latest, before the attempt's
// outcome is written. A process that dies in between loses at most the checkpoints of its last
// ProgressInterval, and the next attempt resumes from the one before. A failed write is logged,
// never returned; the error says only that the call was made outside a job or with a bad value.
func SaveCheckpoint(ctx context.Context, v any) error {
	if v == nil {
		return fmt.Errorf("%w: checkpoint is nil", ErrInvalidArgs)
	}
	raw, err := checkpointData(v)
	if err != nil {
		return err
	}
	return report(ctx, "SaveCheckpoint", store.ProgressParams{Checkpoint: raw})
}

// LastCheckpoint decodes into v the latest checkpoint saved for the job whose context ctx is (by an
// earlier attempt, or by this one once its save was written) and reports whether there was one. Call
// it at the start of Work to resume where a failed attempt stopped:
//
//	var cp struct{ Offset int }
//	if _, err := pronto.LastCheckpoint(ctx, &cp); err != nil { return err }
//	for i := cp.Offset; i < len(rows); i++ { ... pronto.SaveCheckpoint(ctx, map[string]int{"offset": i + 1}) }
//
// Each call reads the store once.
func LastCheckpoint(ctx context.Context, v any) (bool, error) {
	h, ok := ctx.Value(resultKey{}).(*resultHolder)
	if !ok {
		return false, errors.New("pronto: LastCheckpoint called outside a job's context")
	}
	p, err := h.client.store.GetProgress(ctx, h.run.row.ID)
	if err != nil {
		return false, fmt.Errorf("pronto: checkpoint of job %s: %w", h.run.row.ID, err)
	}
	if p == nil || p.Checkpoint == nil {
		return false, nil
	}
	if err := json.Unmarshal(p.Checkpoint, v); err != nil {
		return false, fmt.Errorf("pronto: checkpoint of job %s does not decode: %w", h.run.row.ID, err)
	}
	return true, nil
}

func reportProgress(ctx context.Context, value *float64, data any) error {
	raw, err := progressData(data)
	if err != nil {
		return err
	}
	return report(ctx, "ReportProgress", store.ProgressParams{Value: value, Data: raw})
}

// report hands p to the throttle of the run whose context ctx is.
func report(ctx context.Context, caller string, p store.ProgressParams) error {
	h, ok := ctx.Value(resultKey{}).(*resultHolder)
	if !ok {
		return fmt.Errorf("pronto: %s called outside a job's context", caller)
	}
	h.progressOnce.Do(func() {
		row := h.run.row
		c := h.client
		h.progress = newProgressThrottle(func(p store.ProgressParams) { c.writeProgress(row, p) }, ProgressInterval)
		// The run is live until end stops the watch: a stall is this run's.
		c.watchStall(h.progress, row, nil)
	})
	if h.progress == nil {
		return nil // the attempt is over: a late report is ignored, as the store would
	}
	p.ID, p.Token = h.run.row.ID, h.run.row.ClaimToken
	h.progress.report(p)
	return nil
}

// checkpointData encodes a checkpoint: a JSON object within MaxProgressDataBytes.
func checkpointData(v any) (json.RawMessage, error) {
	raw, err := jsonObject(v, "checkpoint")
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: checkpoint is empty", ErrInvalidArgs)
	}
	return raw, nil
}

// progressData encodes data, which must be nil or encode as a JSON object within the size limit.
func progressData(data any) (json.RawMessage, error) {
	return jsonObject(data, "progress data")
}

// jsonObject encodes data (what names it in errors), which must be nil or encode as a JSON object
// within MaxProgressDataBytes.
func jsonObject(data any, what string) (json.RawMessage, error) {
	if data == nil {
		return nil, nil
	}
	var raw []byte
	switch d := data.(type) {
	case json.RawMessage:
		if len(d) == 0 {
			return nil, nil
		}
		raw = d
	default:
		b, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %s does not encode as JSON: %w", ErrInvalidArgs, what, err)
		}
		raw = b
	}
	if len(raw) > MaxProgressDataBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidArgs, what, len(raw), MaxProgressDataBytes)
	}
	if err := jsoncheck.Check(raw, what); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%w: %s must be a JSON object", ErrInvalidArgs, what)
	}
	return raw, nil
}

// writeProgress writes one (merged) report and emits EventProgress when it was recorded. The
// throttle raised p.Value to the run's highest, which is what the store keeps (a lower report is
// ignored), so the event announces the job's progress, never a value it went back to.
func (c *Client) writeProgress(row *JobRow, p store.ProgressParams) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := c.store.SetProgress(ctx, p)
	if err != nil {
		c.cfg.Logger.Warn("pronto: writing job progress failed", jobAttrs(row, "err", err)...)
		return
	}
	if ok && (p.Value != nil || p.Data != nil) && c.events.wants(EventProgress) { // not for a checkpoint alone
		out := *row
		out.Progress = &JobProgress{Value: p.Value, Data: p.Data, RunStartedAt: row.StartedAt, UpdatedAt: time.Now()}
		c.events.emit(&Event{Kind: EventProgress, Job: &out, At: out.Progress.UpdatedAt})
	}
	if ok && p.Checkpoint != nil && c.events.wants(EventCheckpointSaved) {
		out := *row
		out.LastCheckpoint = p.Checkpoint
		c.events.emit(&Event{Kind: EventCheckpointSaved, Job: &out, At: time.Now()})
	}
}

// emitProgressCompleted emits EventProgressCompleted for out, a job just completed whose attempt
// reported progress, data the last progress data reported (nil for none).
func (c *Client) emitProgressCompleted(out *JobRow, data json.RawMessage, dur time.Duration, at time.Time) {
	if !c.events.wants(EventProgressCompleted) {
		return
	}
	j := *out
	one := 1.0
	j.Progress = &JobProgress{Value: &one, Data: data, RunStartedAt: out.StartedAt, UpdatedAt: at}
	c.events.emit(&Event{Kind: EventProgressCompleted, Job: &j, Duration: dur, At: at})
}

// reportedProgress reports whether the run reported progress (a value or data, not a checkpoint
// alone), and the last data it reported.
func (t *progressThrottle) reportedProgress() (bool, json.RawMessage) {
	if t == nil {
		return false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.progressed, t.lastData
}

// JobProgressReport records progress reported by an OJS worker over HTTP for the active job id (PUT
// /ojs/v1/jobs/{id}/progress): value (clamped to 0..1) and data as ReportProgress takes them. It is
// throttled like ReportProgress, per job. It returns ErrNotFound for a job that does not exist; a
// report for a job that is not active is accepted and ignored, as the OJS spec asks. The report names
// no claim, so it is fenced as RemoteProgress fences one without ClaimToken or WorkerID. See
// JobProgressCheckpoint for a report that carries a checkpoint.
func (c *Client) JobProgressReport(ctx context.Context, id string, value *float64, data json.RawMessage) (*JobRow, error) {
	return c.RemoteProgress(ctx, RemoteProgressParams{ID: id, Value: value, Data: data})
}

// JobProgressCheckpoint is JobProgressReport with a checkpoint (a JSON object, or nil for none), as
// SaveCheckpoint saves it: the job's next attempt finds it as JobRow.LastCheckpoint.
func (c *Client) JobProgressCheckpoint(ctx context.Context, id string, value *float64, data, checkpoint json.RawMessage) (*JobRow, error) {
	return c.RemoteProgress(ctx, RemoteProgressParams{ID: id, Value: value, Data: data, Checkpoint: checkpoint})
}

// RemoteProgressParams is a progress report of an OJS worker on the job it runs.
type RemoteProgressParams struct {
	ID string
	// WorkerID, ClaimToken and Attempt name the claim the report is about, as in RemoteAckParams.
	WorkerID   string
	ClaimToken string
	Attempt    int
	// Value is the progress (clamped to 0..1), nil for none.
	Value *float64
	// Data is a JSON object of progress data, nil for none.
	Data json.RawMessage
	// Checkpoint is a JSON object the job's next attempt finds as JobRow.LastCheckpoint, nil for none.
	Checkpoint json.RawMessage
}

// RemoteProgress records the progress report p of an active job (at least one of Value, Data and
// Checkpoint), throttled per job like ReportProgress, and returns the job as read. A job that is not
// active is returned unchanged, with no error (the OJS spec accepts such reports and ignores them).
// A report held back by the throttle is written before RemoteAck or RemoteNack of its claim ends
// the attempt (given to this client), and dropped when the job's next claim reports.
//
// A report is fenced as RemoteAck fences an outcome: it counts only for the claim its sender holds, and
// one for a claim that is no longer the job's current one (its lease ran out and the job was fetched
// again) gives a *StaleClaimError, so a run that lost its claim cannot write the new claim's progress
// or the checkpoint its next attempt resumes from.
func (c *Client) RemoteProgress(ctx context.Context, p RemoteProgressParams) (*JobRow, error) {
	id, value, checkpoint := p.ID, p.Value, p.Checkpoint
	if err := checkID(id); err != nil {
		return nil, err
	}
	if value == nil && p.Data == nil && checkpoint == nil {
		return nil, invalidf("a progress report needs progress, data, a checkpoint or some of them")
	}
	var err error
	if checkpoint != nil {
		if checkpoint, err = checkpointData(checkpoint); err != nil {
			return nil, err
		}
	}
	if value != nil {
		if math.IsNaN(*value) || math.IsInf(*value, 0) {
			return nil, invalidf("progress must be a number from 0 to 1")
		}
		v := min(max(*value, 0), 1)
		value = &v
	}
	raw, err := progressData(p.Data)
	if err != nil {
		return nil, err
	}
	j, err := c.store.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("pronto: progress of job %s: %w", id, err)
	}
	if j.State != StateActive {
		return j, nil
	}
	if j, err = c.activeJob(ctx, claimRef{id, p.WorkerID, p.ClaimToken, p.Attempt}, "report progress of", j); err != nil {
		var te *TransitionError
		if errors.As(err, &te) { // it left active meanwhile
			return c.store.GetJob(ctx, id)
		}
		return nil, err
	}
	// The store writes it only while j.ClaimToken is still the job's claim.
	rep := store.ProgressParams{ID: id, Token: j.ClaimToken, Value: value, Data: raw, Checkpoint: checkpoint}
	for !c.remoteThrottle(j).report(rep) {
		// The claim's throttle ended as its outcome came: a report of the next claim gets a new one.
	}
	return j, nil
}

// remoteThrottle returns the throttle of remote progress reports on job j, made on first use.
func (c *Client) remoteThrottle(j *JobRow) *progressThrottle {
	c.remoteProgressMu.Lock()
	defer c.remoteProgressMu.Unlock()
	if c.remoteProgress == nil {
		c.remoteProgress = make(map[string]*progressThrottle)
	}
	if len(c.remoteProgress) > 10000 {
		// Forget jobs not reported on for a while; a forgotten job's next report is written at once.
		for k, t := range c.remoteProgress {
			if t.idle(time.Now()) {
				delete(c.remoteProgress, k)
			}
		}
	}
	t := c.remoteProgress[j.ID]
	if t != nil {
		return t
	}
	row := j
	t = newProgressThrottle(func(p store.ProgressParams) { c.writeProgress(row, p) }, ProgressInterval)
	// An outcome given to another server does not end the throttle here: a stall is reported only
	// if the job still runs under the claim that reported last (the watch re-arms with the next
	// report, of any run).
	c.watchStall(t, row, func(ctx context.Context, last store.ProgressParams) *JobRow {
		now, err := c.store.GetJob(ctx, row.ID)
		if err != nil || now.State != StateActive || (last.Token != "" && now.ClaimToken != last.Token) {
			return nil
		}
		return now
	})
	c.remoteProgress[j.ID] = t
	c.remoteProgressLen.Store(int64(len(c.remoteProgress)))
	return t
}

// endRemoteProgress is called as a remote worker's claim token on job id ends by its outcome, before
// the outcome is written: it writes the claim's report still waiting in the throttle while the claim
// holds the job, so the attempt's last report (and checkpoint) is kept (ojs-progress.md 6.2, 8.2),
// and forgets the job's throttle, so the next attempt's reports start afresh (5.3).
func (c *Client) endRemoteProgress(id, token string) {
	if c.remoteProgressLen.Load() == 0 {
		return // no job holds a throttle (a report racing this outcome gets a fresh one, as below)
	}
	c.remoteProgressMu.Lock()
	t := c.remoteProgress[id]
	delete(c.remoteProgress, id)
	c.remoteProgressLen.Store(int64(len(c.remoteProgress)))
	c.remoteProgressMu.Unlock()
	if t != nil {
		t.endClaim(token)
	}
}

// withProgress sets j.Progress from the store: the progress of j's latest run, reading 1 once the
// job completed (ojs-progress.md 8.1), or nil when that run reported none; and j.LastCheckpoint.
func (c *Client) withProgress(ctx context.Context, j *JobRow) (*JobRow, error) {
	if j.StartedAt.IsZero() {
		return j, nil // never ran: nothing reported (and no second query)
	}
	p, err := c.store.GetProgress(ctx, j.ID)
	if err != nil {
		return nil, fmt.Errorf("pronto: get job %s: %w", j.ID, err)
	}
	if p != nil && p.Checkpoint != nil {
		j.LastCheckpoint = p.Checkpoint
		p.Checkpoint = nil // JobRow.LastCheckpoint holds it
	}
	if p == nil || !p.RunStartedAt.Equal(j.StartedAt) {
		return j, nil
	}
	if j.State == StateCompleted {
		one := 1.0
		p.Value = &one
	}
	j.Progress = p
	return j, nil
}

// progressThrottle merges progress reports of one job and writes at most one per interval,
// always the latest (highest value, newest data) of the claim reporting last.
type progressThrottle struct {
	write    func(store.ProgressParams)
	interval time.Duration // ProgressInterval but in tests

	mu      sync.Mutex
	last    time.Time
	pending *store.ProgressParams
	timer   *time.Timer
	writing sync.Mutex // serializes writes, so a later report is never overwritten by an earlier one

	// The highest value reported under claim token run (under mu): the value the store keeps.
	run string
	top *float64

	// The stall watch (see watchStall), under mu.
	stallAfter time.Duration
	onStall    func(last store.ProgressParams, at time.Time)
	stallTimer *time.Timer
	reported   time.Time            // when the latest report came
	latest     store.ProgressParams // every report of the run merged (highest value, newest data)
	ended      bool

	progressed bool            // a report carried a value or data (under mu)
	lastData   json.RawMessage // the newest data reported (under mu)
}

func newProgressThrottle(write func(store.ProgressParams), interval time.Duration) *progressThrottle {
	return &progressThrottle{write: write, interval: interval}
}

// report merges p into the pending report and writes it now, or when the interval has passed. It
// returns false, ignoring p, once the throttle has ended.
func (t *progressThrottle) report(p store.ProgressParams) bool {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return false
	}
	t.rearmStall(p)
	if p.Value != nil || p.Data != nil {
		t.progressed = true
		p.Value = t.highest(p)
	}
	if p.Data != nil {
		t.lastData = p.Data
	}
	if t.pending != nil && t.pending.Token != p.Token {
		// An earlier claim's report: that claim ended (the job was fetched again), so the store
		// would refuse it, and merged it would give the new attempt the old one's progress.
		t.pending = nil
	}
	t.merge(p)
	if t.timer != nil {
		t.mu.Unlock()
		return true // the timer writes it
	}
	if wait := t.interval - time.Since(t.last); wait > 0 {
		t.timer = time.AfterFunc(wait, t.flush)
		t.mu.Unlock()
		return true
	}
	t.mu.Unlock()
	t.flush()
	return true
}

// highest returns the highest value reported under p's claim, p's included (t.mu held). Written in
// p's stead, it changes nothing the store keeps, and it is what the job's progress now reads.
func (t *progressThrottle) highest(p store.ProgressParams) *float64 {
	if t.run != p.Token {
		t.run, t.top = p.Token, nil
	}
	if p.Value != nil && (t.top == nil || *p.Value > *t.top) {
		t.top = p.Value
	}
	return t.top
}

// merge folds p, a report of the pending report's claim, into it (t.mu held).
func (t *progressThrottle) merge(p store.ProgressParams) {
	if t.pending == nil {
		t.pending = &p
		return
	}
	if p.Value != nil {
		t.pending.Value = p.Value // the claim's highest
	}
	if p.Data != nil {
		t.pending.Data = p.Data
	}
	if p.Checkpoint != nil {
		t.pending.Checkpoint = p.Checkpoint
	}
}

// flush writes the pending report, if any.
func (t *progressThrottle) flush() {
	t.writing.Lock()
	defer t.writing.Unlock()
	t.mu.Lock()
	p := t.pending
	t.pending = nil
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if p != nil {
		t.last = time.Now()
	}
	t.mu.Unlock()
	if p != nil {
		t.write(*p)
	}
}

// endClaim ends the throttle as claim token ends: later reports are refused (report returns
// false), and the pending report is written first if it is token's, dropped if an earlier claim's.
func (t *progressThrottle) endClaim(token string) {
	t.mu.Lock()
	t.ended = true
	if t.pending != nil && t.pending.Token != token {
		t.pending = nil
	}
	if t.stallTimer != nil {
		t.stallTimer.Stop()
	}
	t.mu.Unlock()
	t.flush()
}

// idle reports whether nothing is pending and the last write is an interval old.
func (t *progressThrottle) idle(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending == nil && t.timer == nil && now.Sub(t.last) > t.interval
}

// JobLastCheckpoint returns the latest checkpoint saved for job id (see SaveCheckpoint), or nil when
// none was or the job does not exist.
func (c *Client) JobLastCheckpoint(ctx context.Context, id string) (json.RawMessage, error) {
	p, err := c.store.GetProgress(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("pronto: checkpoint of job %s: %w", id, err)
	}
	if p == nil {
		return nil, nil
	}
	return p.Checkpoint, nil
}

// watchStall arms t's stall watch when Config.ProgressStallTimeout is set: EventProgressStalled is
// emitted for row when no report comes within the timeout of the last one. live, when not nil, is
// asked before each emission for the job as it runs now under the claim that reported last; nil
// (the run ended) emits nothing.
func (c *Client) watchStall(t *progressThrottle, row *JobRow, live func(context.Context, store.ProgressParams) *JobRow) {
	if c.cfg.ProgressStallTimeout <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stallAfter = c.cfg.ProgressStallTimeout
	t.onStall = func(last store.ProgressParams, at time.Time) {
		if !c.events.wants(EventProgressStalled) {
			return
		}
		cur := row
		if live != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cur = live(ctx, last)
			cancel()
			if cur == nil {
				return
			}
		}
		out := *cur
		out.Progress = &JobProgress{Value: last.Value, Data: last.Data, RunStartedAt: cur.StartedAt, UpdatedAt: at}
		c.events.emit(&Event{Kind: EventProgressStalled, Job: &out, At: time.Now()})
	}
}

// rearmStall merges p into the run's latest progress and restarts the stall watch (t.mu held).
func (t *progressThrottle) rearmStall(p store.ProgressParams) {
	if t.stallAfter <= 0 {
		return
	}
	if p.Value != nil && (t.latest.Value == nil || *p.Value > *t.latest.Value) {
		t.latest.Value = p.Value
	}
	if p.Data != nil {
		t.latest.Data = p.Data
	}
	if t.latest.Token != p.Token {
		t.latest = store.ProgressParams{ID: p.ID, Token: p.Token, Value: p.Value, Data: p.Data} // another run
	}
	t.reported = time.Now()
	if t.stallTimer == nil {
		t.stallTimer = time.AfterFunc(t.stallAfter, t.checkStall)
	} else {
		t.stallTimer.Reset(t.stallAfter)
	}
}

// checkStall runs when the stall timer fires: it reports the stall unless a report came since (a
// Reset racing with the timer) or the run ended.
func (t *progressThrottle) checkStall() {
	t.mu.Lock()
	if t.ended || time.Since(t.reported) < t.stallAfter {
		t.mu.Unlock()
		return
	}
	last, at, onStall := t.latest, t.reported, t.onStall
	t.mu.Unlock()
	onStall(last, at)
}

// end writes the pending report and stops the throttle: later reports are ignored and the stall
// watch stops.
func (t *progressThrottle) end() {
	t.flush()
	t.mu.Lock()
	t.ended = true
	if t.stallTimer != nil {
		t.stallTimer.Stop()
	}
	t.mu.Unlock()
}

// WorkflowProgress is the progress of a workflow as a whole (ojs-progress.md 9), from its steps'.
type WorkflowProgress struct {
	Workflow *WorkflowInfo
	// Value is the aggregate, 0 to 1: for a batch, the share of its jobs completed; for a chain, a
	// group or a dag, the mean of its steps' progress, a completed step counting 1 and a step
	// without progress 0 (for a chain this is the specification's completed steps plus the current
	// step's progress, over the steps).
	Value float64
	// Steps are the workflow's members (not its callbacks) in creation order, each with Progress
	// set as JobGet sets it.
	Steps []*JobRow
}

// WorkflowProgress returns the aggregate progress of workflow id and its steps' progress. It reads
// the workflow, its jobs, and the progress of each step that ran and has not completed (one query
// each); ErrNotFound when the workflow does not exist.
func (c *Client) WorkflowProgress(ctx context.Context, id string) (*WorkflowProgress, error) {
	wf, err := c.WorkflowGet(ctx, id)
	if err != nil {
		return nil, err
	}
	jobs, err := c.WorkflowJobs(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &WorkflowProgress{Workflow: wf}
	var sum float64
	completed := 0
	for _, j := range jobs {
		if j.RunOn != "" {
			continue // a callback, not a member
		}
		if j.State != StateCompleted {
			if j, err = c.withProgress(ctx, j); err != nil {
				return nil, err
			}
		} else {
			one := 1.0
			j.Progress = &JobProgress{Value: &one, RunStartedAt: j.StartedAt, UpdatedAt: j.CompletedAt}
		}
		out.Steps = append(out.Steps, j)
		switch {
		case j.State == StateCompleted:
			completed++
			sum++
		case j.Progress != nil && j.Progress.Value != nil:
			sum += *j.Progress.Value
		}
	}
	if n := len(out.Steps); n > 0 {
		if wf.Type == "batch" {
			out.Value = float64(completed) / float64(n)
		} else {
			out.Value = sum / float64(n)
		}
	}
	return out, nil
}
