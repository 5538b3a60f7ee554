// Package store defines the seam between pronto's client machinery and the databases that hold its
// jobs. Every backend (store/postgres, store/sqlite, store/memory) implements Store, and every one of
// them passes the shared suite in store/storetest, so a behaviour proved for one is proved for all.
//
// The interface is internal in spirit: applications construct a backend and hand it to
// pronto.NewClient; they do not call Store methods themselves. It may change between minor versions.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// State is the lifecycle state of a job, exactly the eight states of the OJS core specification.
type State string

// The eight OJS job states. Completed, Cancelled and Discarded are terminal.
const (
	StateScheduled State = "scheduled"
	StateAvailable State = "available"
	StatePending   State = "pending"
	StateActive    State = "active"
	StateCompleted State = "completed"
	StateRetryable State = "retryable"
	StateCancelled State = "cancelled"
	StateDiscarded State = "discarded"
)

// AllStates lists every state in lifecycle order.
var AllStates = []State{
	StateScheduled, StateAvailable, StatePending, StateActive,
	StateCompleted, StateRetryable, StateCancelled, StateDiscarded,
}

// Valid reports whether s is one of the eight OJS states.
func (s State) Valid() bool {
	for _, v := range AllStates {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether no further transition leaves s (except an operator's manual retry).
func (s State) Terminal() bool {
	return s == StateCompleted || s == StateCancelled || s == StateDiscarded
}

// Finishable reports whether a Completion may move an active job to s: completed, retryable,
// scheduled (snooze), discarded, cancelled, or available (returned unfinished).
func (s State) Finishable() bool {
	switch s {
	case StateCompleted, StateRetryable, StateScheduled, StateDiscarded, StateCancelled, StateAvailable:
		return true
	}
	return false
}

// Sentinel errors that every backend returns (wrapped) so callers can branch with errors.Is.
var (
	// ErrNotFound: no job (or queue) with the given identifier exists.
	ErrNotFound = errors.New("not found")
	// ErrInvalidTransition: the requested operation is not allowed from the job's current state.
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrDuplicate: a job with the same id already exists.
	ErrDuplicate = errors.New("duplicate job")
	// ErrUnsupported: the backend cannot offer the requested operation.
	ErrUnsupported = errors.New("operation not supported by this store")
	// ErrInvalidParams: the request is malformed (a field the operation does not accept, a parent
	// outside the workflow, a cycle). The error's text names the problem.
	ErrInvalidParams = errors.New("invalid parameters")
	// ErrClosed: the store was closed; it serves nothing more (IsUnavailable counts it).
	ErrClosed = errors.New("store is closed")
)

// TransitionError reports a refused state transition: what was asked, and the state the job was in.
// It matches ErrInvalidTransition with errors.Is.
type TransitionError struct {
	JobID     string
	Operation string
	From      State
	// Reason, when set, says why the operation was refused although From allows it in general
	// (ReasonAwaitedParent).
	Reason string
}

// MaxAttemptsLimit is the most attempts a job can have: every store keeps the count in 32 bits (a
// PostgreSQL integer), and an attempt given back (RefundAttempt) stops growing it there.
const MaxAttemptsLimit = 1<<31 - 1

// ReasonAwaitedParent refuses DeleteJob of a workflow job that a pending child still waits for: the
// child is released by its parents' outcomes and reads their results, so deleting one would leave
// it pending for good.

const ReasonAwaitedParent = "a pending job of its workflow still waits for it (cancel the workflow, or that job, first)"

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("invalid state transition: cannot %s job %s in state %q", e.Operation, e.JobID, e.From)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// The error types a store records itself. Each ends a claim whose run may still be at work and
// report: an outcome that names no claim cannot be told from that run's (see pronto.RemoteAck).
const (
	// ErrorTypeLeaseExpired: the claim's lease ran out and the job was rescued.
	ErrorTypeLeaseExpired = "lease_expired"
	// ErrorTypeCancelled: the job was cancelled while a claim of it ran (CancelJob, CancelWorkflow,
	// a unique replace).
	ErrorTypeCancelled = "cancelled"
)

// AttemptError is one entry of a job's error history: what went wrong on which attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// StartedAt is when the failed attempt started (the job's StartedAt at the failure), set by the
	// store when it records the entry; zero for failures before a start (expired, rate-limited) and
	// for entries recorded before pronto kept it.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Type is the error's class (a Go type name, "panic", "timeout", ErrorTypeLeaseExpired,
	// ErrorTypeCancelled, or what an OJS worker reported).
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
	// Trace holds a stack trace for panics, when known.
	Trace string `json:"trace,omitempty"`
	// Retryable is false when the failure was declared non-retryable.
	Retryable *bool `json:"retryable,omitempty"`
	// Details carries structured data an OJS worker attached to its failure.
	Details json.RawMessage `json:"details,omitempty"`
}

// Job is one stored job: the OJS job model plus the bookkeeping pronto needs.
type Job struct {
	ID    string
	Kind  string // the OJS "type"
	Queue string
	// Args is a JSON array. The typed Go API stores its struct as the array's one element.
	Args json.RawMessage
	// Meta is a JSON object, or nil.
	Meta     json.RawMessage
	Priority int
	State    State
	// Attempt counts the times the job became active; it never decreases except on manual retry.
	Attempt     int
	MaxAttempts int
	// Errors is the history of failed attempts, oldest first.
	Errors []AttemptError
	// Result is the JSON value a successful attempt returned, or nil.
	Result json.RawMessage
	Tags   []string
	// RetryPolicy is the job's own retry policy as JSON (see pronto.RetryPolicy), or nil for the
	// client's default.
	RetryPolicy json.RawMessage
	// Timeout bounds one attempt; zero means none.
	Timeout time.Duration

	CreatedAt time.Time
	// ScheduledAt is when the job is due: in the future for scheduled and retryable jobs, and the moment
	// it became available otherwise.
	ScheduledAt time.Time
	// StartedAt is when the latest attempt began (zero if never).
	StartedAt time.Time
	// CompletedAt is when the job reached a terminal state (zero if not terminal).
	CompletedAt time.Time
	// ExpiresAt: a job still not started at this time is discarded instead of run (zero: never).
	ExpiresAt time.Time

	// LeaseExpiresAt is when an active job's lease runs out unless its worker heartbeats.
	LeaseExpiresAt time.Time
	// WorkerID names the client (or OJS worker) holding an active job.
	WorkerID string
	// ClaimToken identifies the claim under which an active job runs: every claim writes a new
	// random one, so no two runs of a job ever share it, even when a database crash rolled a claim
	// back and the job was claimed again under the same attempt number. Finish and Heartbeat given
	// a token act only while the job still runs under it. "" for jobs that are not active.
	ClaimToken string

	// UniqueKey is the job's uniqueness fingerprint (see InsertParams.UniqueKey), or "" for none.
	// The store clears it when the key's period has run out and another job took the key over.
	UniqueKey string
	// UniqueStates are the states in which UniqueKey blocks another job with the same key.
	UniqueStates []State
	// UniqueUntil ends the key's hold regardless of state (zero: no period).
	UniqueUntil time.Time
	// Duplicate is set only on a job Insert returns instead of inserting a new one: an existing job
	// held the new job's UniqueKey and the conflict policy was ConflictIgnore. It is not stored.
	Duplicate bool
	// Replaced is set only on a job Insert returns that took its UniqueKey over under
	// ConflictReplace or ConflictReplaceExceptSchedule: the jobs the insert cancelled for it (stored
	// ones, or an earlier job of the same batch), each as it was just before, as CancelWorkflow
	// returns them: its state then, and for an active one the WorkerID and ClaimToken of the run it
	// stopped, so that the caller reports the cancels no run reports. A holder already terminal only
	// gives its key up and is not listed. It is not stored.
	Replaced []*Job

	// Tenant is the job's fair-scheduling key ("" for none): see Claim.
	Tenant string
	// RateKey names the rate/concurrency limit the job is subject to (see RateLimit), or "".
	RateKey string

	// WorkflowID is the workflow the job belongs to ("" for none). Set only through InsertWorkflow.
	WorkflowID string
	// ParentIDs are the workflow jobs that must finish before this one is released (see RunOn).
	ParentIDs []string
	// RunOn is set on a workflow's callbacks: the outcome of its parents that releases it. Jobs with a
	// RunOn are not members of the workflow: Workflow.Counts leaves them out and Workflow.Callbacks
	// counts them, and its state waits for those that run (see DeriveWorkflowState). "" for members.
	RunOn RunOn
	// ParentResults is a JSON array with the Result of each parent, in ParentIDs order (null for a
	// parent without one), written when the job is released. Nil for jobs without parents.
	ParentResults json.RawMessage

	// Progress is what the job's latest run reported (see ProgressStore). Stores leave it nil in the
	// jobs they return; the client's JobGet fills it in.
	Progress *Progress
	// LastCheckpoint is the latest checkpoint saved for the job by any of its runs (see
	// Progress.Checkpoint), the state its next attempt resumes from. Stores leave it nil; the
	// client's JobGet and the HTTP fetch of a retried job fill it in.
	LastCheckpoint json.RawMessage
}

// InsertParams describes one job to insert. The client fills every field; the store writes them as
// given, except that a zero ScheduledAt means "now" in the database's clock.
type InsertParams struct {
	ID          string
	Kind        string
	Queue       string
	Args        json.RawMessage
	Meta        json.RawMessage
	Priority    int
	State       State // available, scheduled or pending
	MaxAttempts int
	RetryPolicy json.RawMessage
	Timeout     time.Duration
	Tags        []string
	ScheduledAt time.Time // zero: now
	ExpiresAt   time.Time // zero: never

	// UniqueKey, when set, makes the insert unique (see the "Unique jobs" section of features.go):
	// no two jobs hold the same key while both are in one of UniqueStates (default
	// DefaultUniqueStates) and before UniqueUntil (zero: no period). OnConflict says what happens
	// when an existing job holds the key (default ConflictReject).
	UniqueKey    string
	UniqueStates []State
	UniqueUntil  time.Time
	OnConflict   OnConflict

	Tenant string

	// RateKey subjects the job to the limit stored under that key (see RateLimit). RateLimit, when
	// set, creates or replaces that limit in the same transaction as the insert.
	RateKey   string
	RateLimit *RateLimit

	// WorkflowID, ParentIDs and RunOn are only accepted by InsertWorkflow; Insert rejects a job that
	// sets any of them (wrapping ErrInvalidParams).
	WorkflowID string
	ParentIDs  []string
	RunOn      RunOn
}

// ClaimParams asks for up to Limit claimable jobs of one queue.
type ClaimParams struct {
	Queue string
	// Kinds, when non-empty, restricts the claim to these kinds (the kinds the client has workers for).
	Kinds []string
	Limit int
	// WorkerID is recorded on each claimed job; heartbeats and completions are checked against it.
	WorkerID string
	// WorkerIDs, when not empty, claims for several workers at once (concurrent remote fetches of
	// one queue sharing one claim): the claim takes at most len(WorkerIDs) jobs, and the n jobs it
	// returns carry the first n entries of WorkerIDs as their WorkerID, one entry each, in no
	// particular pairing. Limit and WorkerID are then ignored.
	WorkerIDs []string
	// LeaseDuration is how long each claimed job is held without a heartbeat.
	LeaseDuration time.Duration
	// OnHeldBack, when not nil, hears of the jobs the claim held back without claiming them, as they
	// now are: those it discarded (dropped) and those it moved to scheduled (rescheduled) because
	// their rate key's limit had no room and says so (RateLimit.OnLimit LimitDrop, LimitReschedule).
	// It is called after the claim's writes are committed, before Claim returns, and only when there
	// are such jobs: a claim that held nothing back costs nothing more. A claim made of several
	// steps (a Redis Cluster's rounds) may call it more than once, never twice for one job's change.
	// The jobs are the callback's to keep; it must not call the store's Claim.
	OnHeldBack func(dropped, rescheduled []*Job)
	// OnLimited, when not nil, hears of the rate keys of the claim's queue whose limit has no room
	// for a due job of theirs (of the claim's kinds): those it passed a job over for (the job waits,
	// or OnHeldBack reports it dropped or rescheduled), and those of the jobs it took that it leaves
	// without room while more of their jobs wait (a store that keeps an exhausted key's jobs out of
	// later claims' way, as SQLite holds them, names the key while they wait), each with the bound
	// that stops it (LimitHit); and, with LimitHit.HasRoom, the keys of jobs it took that have more
	// jobs waiting though their limit has room left. Each key is named once per call. It is called
	// after the claim's writes are committed, before Claim returns, and only when there are such
	// keys: a claim that met no rate-limited job costs nothing more. The hits are the callback's to
	// keep; it must not call Claim.
	OnLimited func(hits []LimitHit)
}

// ReportLimited calls p.OnLimited with hits when it is set and hits is not empty.
func (p *ClaimParams) ReportLimited(hits []LimitHit) {
	if p.OnLimited != nil && len(hits) > 0 {
		p.OnLimited(hits)
	}
}

// ReportHeldBack calls p.OnHeldBack with dropped and rescheduled when it is set and either is not
// empty.
func (p *ClaimParams) ReportHeldBack(dropped, rescheduled []*Job) {
	if p.OnHeldBack != nil && (len(dropped) > 0 || len(rescheduled) > 0) {
		p.OnHeldBack(dropped, rescheduled)
	}
}

// SlotLimit is the most jobs the claim takes: len(WorkerIDs) when set, else Limit.
func (p *ClaimParams) SlotLimit() int {
	if len(p.WorkerIDs) > 0 {
		return len(p.WorkerIDs)
	}
	return p.Limit
}

// WorkerFor is the worker id to record on the i-th job (from 0) a claim returns.
func (p *ClaimParams) WorkerFor(i int) string {
	if len(p.WorkerIDs) > 0 {
		return p.WorkerIDs[i]
	}
	return p.WorkerID
}

// ReassignWorkers is for stores whose claim path records one worker id on every job it claims
// (WorkerIDs[0] with WorkerIDs set): it gives the claimed jobs the first len(jobs) entries of
// p.WorkerIDs, one each, keeping the entries jobs already carry, and returns the jobs whose WorkerID
// it changed, which the store must then record. Without WorkerIDs it changes nothing.
func ReassignWorkers(p *ClaimParams, jobs []*Job) (changed []*Job) {
	if len(p.WorkerIDs) == 0 || len(jobs) == 0 {
		return nil
	}
	entries := p.WorkerIDs[:min(len(jobs), len(p.WorkerIDs))]
	need := make(map[string]int, len(entries))
	for _, w := range entries {
		need[w]++
	}
	var misfits []*Job
	for _, j := range jobs {
		if need[j.WorkerID] > 0 {
			need[j.WorkerID]--
		} else {
			misfits = append(misfits, j)
		}
	}
	next := 0
	for _, j := range misfits {
		for next < len(entries) && need[entries[next]] == 0 {
			next++
		}
		if next == len(entries) {
			break // more jobs than entries: a store bug the shared cases catch
		}
		j.WorkerID = entries[next]
		need[entries[next]]--
		changed = append(changed, j)
	}
	return changed
}

// Completion is the outcome of one attempt, applied by Store.Finish. It only takes effect while the
// job is still active with the same Attempt (and claim Token, when given): a job rescued, cancelled
// or re-claimed meanwhile is left as it is.
type Completion struct {
	ID      string
	Attempt int
	// Token, when set, is the ClaimToken of the run reporting: the completion applies only while
	// the job is still active under that very claim. Every run the client tracks sets it; without
	// it only Attempt fences, which a rolled-back claim or a manual retry can repeat.
	Token string
	// State is the job's next state: completed, retryable, scheduled (snooze), discarded, cancelled, or
	// available (returned unfinished, for example at shutdown).
	State State
	// ScheduledAt is when a retryable or scheduled job is next due (zero: now).
	ScheduledAt time.Time
	// Error, when set, is appended to the job's error history.
	Error *AttemptError
	// Result is stored for completed jobs.
	Result json.RawMessage
	// RefundAttempt gives back the attempt this run used (snooze, shutdown): MaxAttempts grows by one,
	// so Attempt stays monotonic while the retry budget is unchanged (up to MaxAttemptsLimit).
	RefundAttempt bool
	// Remove, with State completed, deletes the job as its outcome is written instead of keeping it
	// completed until retention cleanup (pronto.QueueConfig.RemoveCompleted): the job is then gone
	// as a cleaned-up job is, its result with it. A job that others still read once completed is
	// kept completed all the same: a workflow's job (its children and its workflow read its state
	// and result) and a unique job whose key holds in the completed state. Other states ignore it.
	Remove bool
}

// FinishResult says, per Completion in order, whether it was applied. A completion is applied at
// most once: sent again after its outcome was written, it finds its job no longer active under its
// claim and is not applied, on every store.
type FinishResult struct {
	ID      string
	Applied bool
}

// FinishPartialError is the error of a Finish that wrote part of its batch and failed for the rest
// (a store that cannot apply a batch in one transaction: Redis, one call per queue). The outcomes it
// wrote must not be sent again: sent again, they would be reported not applied (see FinishResult).
// A caller that retries sends only the completions whose fate is unknown.
type FinishPartialError struct {
	// Results has one entry per completion, in order; it is meaningful only where Known is set.
	Results []FinishResult
	// Known reports, per completion, whether its result is known (its write succeeded, applied or
	// not). The others failed with Err, or may have been written with their reply lost.
	Known []bool
	// Err is why the others failed.
	Err error
}

func (e *FinishPartialError) Error() string {
	n := 0
	for _, k := range e.Known {
		if !k {
			n++
		}
	}
	if n == 0 {
		return fmt.Sprintf("every outcome's result known, but: %v", e.Err)
	}
	return fmt.Sprintf("the fate of %d of %d outcomes is unknown: %v", n, len(e.Known), e.Err)
}

// Unwrap returns Err, so that IsUnavailable and IsRefused judge the failure.
func (e *FinishPartialError) Unwrap() error { return e.Err }

// HeartbeatParams extends the leases of jobs a worker holds.
type HeartbeatParams struct {
	WorkerID string
	IDs      []string
	// Tokens, when set, holds the ClaimToken of each job of IDs, in the same order: a job is then
	// extended only while it still runs under that claim, so a run that lost its lease, and whose
	// job was claimed again by the same worker, learns it at its next heartbeat.
	Tokens        []string
	LeaseDuration time.Duration
}

// RescueParams bounds one pass of the lease rescuer.
type RescueParams struct {
	Limit int
}

// RescueResult reports the jobs a rescue pass took back from dead workers.
type RescueResult struct {
	Requeued  []*Job // returned to available
	Discarded []*Job // attempts spent, now discarded
}

// CleanupParams says which terminal jobs are old enough to delete: those whose CompletedAt is before
// the state's time. A zero time deletes nothing of that state (keep forever).
type CleanupParams struct {
	CompletedBefore time.Time
	CancelledBefore time.Time
	DiscardedBefore time.Time
	Limit           int
	// Queues, when not empty, limits the pass to these queues; SkipQueues are left out of it
	// (queues with a retention of their own, ojs-admin-api.md 6.6).
	Queues     []string
	SkipQueues []string
}

// Cleans reports whether p's pass covers queue q.
func (p *CleanupParams) Cleans(q string) bool {
	return (len(p.Queues) == 0 || slices.Contains(p.Queues, q)) && !slices.Contains(p.SkipQueues, q)
}

// PruneParams says which discarded jobs (the dead letter queue) PruneDiscarded deletes: those whose
// CompletedAt is before Before (zero: none by age), and those beyond the newest Keep discarded jobs
// of the whole store, by CompletedAt (Keep <= 0: none by count); at most Limit in all, oldest first.
// Queues and SkipQueues narrow "the whole store" for queues with a retention of their own
// (ojs-dead-letter.md 5.3).
type PruneParams struct {
	Before time.Time
	Keep   int
	Limit  int
	// Queues, when not empty, limits the pass to these queues: Before applies to their jobs, and Keep
	// bounds their jobs together.
	Queues []string
	// SkipQueues are left out of the pass, and out of Keep's count.
	SkipQueues []string
}

// Prunes reports whether p's pass covers queue q.
func (p *PruneParams) Prunes(q string) bool {
	return (len(p.Queues) == 0 || slices.Contains(p.Queues, q)) && !slices.Contains(p.SkipQueues, q)
}

// DiscardedPruner is implemented by stores that bound the dead letter queue by count as well as by
// age (ojs-dead-letter.md 5, max_count). A workflow job a pending child still waits for is kept,
// as Cleanup keeps it.
type DiscardedPruner interface {
	// PruneDiscarded deletes the discarded jobs p selects and returns how many per queue.
	PruneDiscarded(ctx context.Context, p PruneParams) (map[string]int, error)
}

// DiscardedArchiver is implemented by stores that can prune the dead letter queue in two steps, so
// that its jobs are archived before they are deleted (ojs-dead-letter.md 8.2, the archive pruning
// policy): read the jobs a pass would delete, hand them to the archive, then delete exactly those.
type DiscardedArchiver interface {
	// PruneCandidates returns the discarded jobs PruneDiscarded(ctx, p) would delete now, oldest
	// first (by CompletedAt), and deletes nothing.
	PruneCandidates(ctx context.Context, p PruneParams) ([]*Job, error)
	// DeleteDiscarded deletes each of jobs (by ID) that is still discarded with the same
	// CompletedAt, the version the caller read and archived: a job retried since, or retried and
	// discarded again, is kept. A workflow job a pending child still waits for is kept too. It
	// returns how many it deleted per queue.
	DeleteDiscarded(ctx context.Context, jobs []*Job) (map[string]int, error)
}

// ListParams filters and pages a job listing. Jobs come in id order (creation order for UUIDv7).
type ListParams struct {
	States []State
	Queues []string
	Kinds  []string
	// Tags, when not empty, lists only jobs that have every one of these tags (and maybe others).
	Tags []string
	// After is the cursor: only jobs with an id greater than After (or smaller when Descending).
	After      string
	Descending bool
	Limit      int
	// WorkflowID, when set, lists only that workflow's jobs (members and callbacks).
	WorkflowID string
	// Tenant, when set, lists only that tenant's jobs (InsertParams.Tenant), across queues. Stores
	// read the tenant's own jobs (an index by tenant), so a small tenant's page costs the same beside
	// a large tenant's backlog (a Redis Cluster keeps one per queue and merges them).
	Tenant string
	// CreatedAfter and CreatedBefore, when set, list only jobs created at or after CreatedAfter and
	// before CreatedBefore, to the millisecond, as their UUIDv7 id records it (see IDTimeBound): the
	// bounds are a range of the id order, so a page costs the same as without them.
	CreatedAfter, CreatedBefore time.Time
	// FinishedAfter and FinishedBefore, when set, list only jobs whose CompletedAt is at or after
	// FinishedAfter and before FinishedBefore (so only terminal jobs). A job whose id carries a time
	// later than FinishedBefore plus FinishedSlack is not listed with FinishedBefore (see IDWindow).
	FinishedAfter, FinishedBefore time.Time
}

// QueueInfo is a queue's pause flag and its job counts per state.
type QueueInfo struct {
	Name   string
	Paused bool
	Counts map[State]int64
}

// NotificationKind says what a Notification announces.
type NotificationKind string

// Notification kinds.
const (
	// NotifyInsert: jobs became claimable (or scheduled, see DueAt) in Queue.
	NotifyInsert NotificationKind = "insert"
	// NotifyCancel: job JobID was cancelled; a client running it cancels its context.
	NotifyCancel NotificationKind = "cancel"
	// NotifyPause and NotifyResume: Queue was paused or resumed.
	NotifyPause  NotificationKind = "pause"
	NotifyResume NotificationKind = "resume"
	// NotifyReconnect: the notifier lost its connection and is back; anything may have been missed,
	// so every producer claims at once.
	NotifyReconnect NotificationKind = "reconnect"

	// Client signals, sent with Notifier.Signal by the clients themselves so that, of the clients
	// working a queue, one claims the jobs an insert announces (see Notification.Nonce).

	// NotifyPresence: client Client works Queue with the kinds fingerprinted by Fingerprint. Clients
	// repeat it every second or so; one not heard from for a few seconds is gone.
	NotifyPresence NotificationKind = "presence"
	// NotifyGone: client Client stopped claiming.
	NotifyGone NotificationKind = "gone"
	// NotifyOverflow: client Client was to claim jobs announced in Queue but has no free worker; the
	// other clients working Queue claim them.
	NotifyOverflow NotificationKind = "overflow"
)

// Notification is one message on a store's notification channel.
type Notification struct {
	Kind  NotificationKind
	Queue string
	JobID string
	// ClaimToken, on a cancel, is the claim token of the run it stops, when the store knows it: a
	// holder that hears of the cancellation before the run reaches it (a hand-off buffer, a client
	// between claim and start) stops that run, and no later one, by it.
	ClaimToken string
	// DueAt, for inserts of jobs due later, is the earliest due time among them (zero: due now).
	DueAt time.Time
	// Nonce, on an insert, is a random non-zero number that the clients working Queue hash to agree,
	// without talking, on the one of them that claims at once; zero means every client claims. A
	// store whose notifications reach several processes sets it on the inserts it announces.
	Nonce uint32
	// Client is the sender of a client signal (presence, gone, overflow).
	Client string
	// Fingerprint, on a presence signal, identifies the set of kinds the client works in Queue:
	// clients that claim different kinds cannot stand in for each other.
	Fingerprint string
}

// Notifier delivers notifications published through its store (by any process, where the backend
// allows) to subscribers in this process.
type Notifier interface {
	// Subscribe registers fn for every notification until the returned function is called. fn must not
	// block: it runs on the notifier's delivery goroutine.
	Subscribe(fn func(Notification)) (unsubscribe func())
	// Signal publishes client signals (NotifyPresence, NotifyGone, NotifyOverflow) to every
	// subscriber the store's notifications reach, this process's included. Other kinds are refused.
	Signal(ctx context.Context, ns []Notification) error
}

// Store is what a backend implements. Every method is safe for concurrent use.
type Store interface {
	// Migrate applies all pending migrations.
	Migrate(ctx context.Context) error

	// Insert writes jobs and announces, once per queue touched, that they exist. An id that already
	// exists fails the whole call with ErrDuplicate and inserts nothing (the batch is atomic).
	//
	// Written as given: a zero ScheduledAt becomes the database's now; CreatedAt is now; Attempt is 0.
	// The NotifyInsert of a queue carries DueAt zero when any of its new jobs is due now, otherwise the
	// earliest due time among them. Pending jobs announce nothing.
	Insert(ctx context.Context, params []*InsertParams) ([]*Job, error)

	// Claim atomically moves up to p.Limit claimable jobs of p.Queue to active and returns them: jobs
	// that are available, or scheduled/retryable and due, not expired, in a queue that is not paused,
	// highest priority first, then earliest due, then lowest id. No job is returned to two claimers.
	//
	// Fair scheduling: in a queue holding claimable jobs with a Tenant (and no RateKey), claims take
	// jobs in turns, one per turn, returned in the order of the turns: each tenant with claimable jobs,
	// then the jobs without a tenant together, then round again, the rotation's place kept per queue
	// across claims. Within a tenant the order above holds. Each turn costs the same however many
	// tenants the queue has (a rotating cursor over the tenants with claimable jobs, never a scan of
	// all of them), and a queue without tenant jobs is claimed exactly as without this rule. Jobs
	// with a RateKey keep their key's rules: the memory and Redis stores claim them in the turn of
	// the jobs without a tenant; while a queue holds claimable rate-keyed jobs the database stores
	// (PostgreSQL, SQLite) claim it by the rate-limit path, in plain order, without turns. On the
	// database stores the jobs without a tenant take their turn only when one of them is among the
	// queue's first 64 claimable jobs in plain order. Every store (memory, SQLite,
	// PostgreSQL, Redis) implements this; per-tenant weights are not implemented yet (every tenant
	// has one turn per round).
	//
	// An error means the caller got no job. A claim that may have committed without its caller
	// hearing so (the reply lost: a broken connection, ctx ending after the claim was sent) must
	// not leave its jobs to the rescue, which would spend attempts that never ran: the PostgreSQL
	// store finds them by the claim's tag, the Redis store by the claim's tokens, and returns them
	// to available with the attempt refunded (their lostclaim.go); the memory and SQLite stores
	// cannot lose a reply.
	Claim(ctx context.Context, p ClaimParams) ([]*Job, error)

	// Finish applies completions in one batch. Per state: completed sets CompletedAt and Result;
	// retryable and scheduled set ScheduledAt (zero: now); discarded and cancelled set CompletedAt;
	// available sets ScheduledAt to now. Every one clears the lease and worker id and appends Error when
	// given. Jobs made claimable or scheduled are announced per queue (NotifyInsert with DueAt).
	//
	// A completion is applied at most once: of two that report the same run (a worker's request
	// sent twice), one is applied and the other is not. The SQL and memory stores apply a batch in
	// one transaction: all of it or none. A store that cannot (Redis: one call per queue) may fail
	// after part of the batch was written; it then returns a *FinishPartialError saying which
	// results are known, and a caller that retries sends only the others.
	Finish(ctx context.Context, completions []Completion) ([]FinishResult, error)

	// Heartbeat extends the leases of the listed jobs held by the worker. It returns the ids it could
	// not extend (cancelled, rescued or finished elsewhere): their runs should stop.
	Heartbeat(ctx context.Context, p HeartbeatParams) (lost []string, err error)

	// Rescue returns active jobs whose lease expired to available (with an error entry saying so), or
	// discards them when their attempts are spent, and announces the queues it made claimable.
	Rescue(ctx context.Context, p RescueParams) (RescueResult, error)

	// Promote moves scheduled and retryable jobs that are due to available, announces their queues, and
	// returns how many it moved. Claim does not need it (due jobs are claimable as they are); it keeps
	// the visible states truthful.
	Promote(ctx context.Context, limit int) (int, error)

	// DiscardExpired discards up to limit jobs not yet started whose expires_at has passed (each with
	// an error entry of type "expired") and returns them as discarded, so that the caller can report
	// each one.
	DiscardExpired(ctx context.Context, limit int) ([]*Job, error)

	// NextDue returns the earliest due time of scheduled or retryable jobs in queue, and false if none.
	NextDue(ctx context.Context, queue string) (time.Time, bool, error)

	// Cleanup deletes old terminal jobs, at most p.Limit, and returns how many. A workflow job that
	// a pending child still waits for is kept, however old: the child is released by its state and
	// reads its result.
	Cleanup(ctx context.Context, p CleanupParams) (int, error)

	// GetJob returns one job, or ErrNotFound.
	GetJob(ctx context.Context, id string) (*Job, error)
	// ListJobs returns one page of jobs and the cursor of the next page ("" at the end).
	ListJobs(ctx context.Context, p ListParams) (jobs []*Job, next string, err error)
	// CancelJob cancels a job that is not terminal (an active job's runner is told through the
	// notifier, by a NotifyCancel naming the run's claim token). A terminal job gives a
	// *TransitionError.
	CancelJob(ctx context.Context, id string) (*Job, error)
	// RetryJob makes a discarded or cancelled job available again with its attempts reset (its error
	// history is kept). Other states give a *TransitionError.
	RetryJob(ctx context.Context, id string) (*Job, error)
	// ActivateJob moves a pending job to available.
	ActivateJob(ctx context.Context, id string) (*Job, error)
	// RunJobNow moves a scheduled or retryable job to available now, keeping its attempts, and
	// announces its queue. Other states give a *TransitionError.
	RunJobNow(ctx context.Context, id string) (*Job, error)
	// SetJobPriority sets the priority of a job waiting to run (available, scheduled or pending),
	// atomically, and returns the job as updated with the priority it had. An available job is
	// claimed in its new order from then on. The value is stored as given (a tenant's priority boost
	// applies at insert only); one outside PriorityMin..PriorityMax gives an error wrapping
	// ErrInvalidParams. Other states (retryable too, as OJS requires) give a *TransitionError with
	// Operation OpChangePriority; a missing job ErrNotFound.
	SetJobPriority(ctx context.Context, id string, priority int) (job *Job, previous int, err error)
	// DeleteJob removes a job that is not active and returns it as it was. A workflow job a pending
	// child still waits for gives a *TransitionError with Reason ReasonAwaitedParent.
	DeleteJob(ctx context.Context, id string) (*Job, error)

	// ListQueues returns every queue that has jobs or a pause flag, with counts per state.
	ListQueues(ctx context.Context) ([]QueueInfo, error)
	// PauseQueue stops claims from queue across the cluster until ResumeQueue.
	PauseQueue(ctx context.Context, queue string) error
	// ResumeQueue lets claims from queue start again and wakes its producers.
	ResumeQueue(ctx context.Context, queue string) error

	// Notifier returns the store's notification channel.
	Notifier() Notifier

	// RateLimiter: the stored limits Claim enforces (see features.go).
	RateLimiter
	// Workflows: jobs released by their parents' outcomes (see features.go).
	Workflows
	// ProgressStore: progress reported by the workers of active jobs (see progress.go).
	ProgressStore
	// ClientRegistry: the records of the live clients using the store (see clients.go).
	ClientRegistry

	// Elect makes leaderID the leader of name for ttl if there is no live leader or it already is,
	// and reports whether leaderID leads now.
	Elect(ctx context.Context, name, leaderID string, ttl time.Duration) (bool, error)
	// Resign gives up leadership of name if leaderID holds it.
	Resign(ctx context.Context, name, leaderID string) error

	// Close releases what the store opened itself (not a pool the application passed in).
	Close() error
}

// Migration is one versioned schema migration and whether it is applied.
type Migration struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// Migrator is implemented by stores with a versioned schema (PostgreSQL, SQLite).
type Migrator interface {
	// MigrateDown reverts the latest steps applied migrations.
	MigrateDown(ctx context.Context, steps int) error
	// MigrationStatus lists every known migration, oldest first.
	MigrationStatus(ctx context.Context) ([]Migration, error)
}

// PgxTxInserter is implemented by stores that can insert jobs inside an application's own pgx
// transaction: the jobs become visible, and their notification is sent, only if it commits.
type PgxTxInserter interface {
	InsertPgxTx(ctx context.Context, tx pgx.Tx, params []*InsertParams) ([]*Job, error)
}

// FastInserter is implemented by stores that can write a batch of jobs, exactly as Insert does
// (atomically, with the same checks, notifications and errors), without building the inserted jobs
// for the caller: a bulk load that needs only to know the jobs are stored (Client.InsertManyFast)
// then spares the time and memory of a Job per job. It returns how many new jobs it stored; a
// unique job that met its key's holder under ConflictIgnore stored nothing and is not counted.
type FastInserter interface {
	InsertFast(ctx context.Context, params []*InsertParams) (int, error)
}

// CountStored counts the jobs of an Insert's result that it stored: all but the unique keys'
// holders it returned in their place (Duplicate).
func CountStored(jobs []*Job) int {
	n := 0
	for _, j := range jobs {
		if !j.Duplicate {
			n++
		}
	}
	return n
}

// SQLTxInserter is implemented by stores that can insert jobs inside an application's own
// database/sql transaction on the same database (the SQLite store: a *sql.Tx on the same file).
// The jobs become visible, and producers are woken, only if it commits.
type SQLTxInserter interface {
	InsertSQLTx(ctx context.Context, tx *sql.Tx, params []*InsertParams) ([]*Job, error)
}

// PgxTxCompleter is implemented by stores that can write one run's outcome inside an application's
// own pgx transaction (the PostgreSQL store), so that the outcome commits, or rolls back, with the
// work's own writes. Like Finish, it applies only while the job is active under c's claim; it
// reports whether it applied. What the outcome releases (workflow children, freed rate-limit
// slots) is part of the same transaction, and its notifications are sent when it commits.
type PgxTxCompleter interface {
	CompletePgxTx(ctx context.Context, tx pgx.Tx, c Completion) (applied bool, err error)
}

// SQLTxCompleter is the database/sql form of PgxTxCompleter (the SQLite store: a *sql.Tx on the
// same file).
type SQLTxCompleter interface {
	CompleteSQLTx(ctx context.Context, tx *sql.Tx, c Completion) (applied bool, err error)
}

// ClaimThenReassign is Claim for stores whose claim paths record one worker id on every job: a
// claim for several workers (p.WorkerIDs) claims under the first entry with claim, then records the
// others with reassign (jobs whose WorkerID ReassignWorkers changed). If that fails, the jobs are
// released (ReleaseClaimed) and the error returned.
func ClaimThenReassign(ctx context.Context, s Store, p ClaimParams, claim func(context.Context, ClaimParams) ([]*Job, error),
	reassign func(context.Context, []*Job) error) ([]*Job, error) {
	if len(p.WorkerIDs) == 0 {
		return claim(ctx, p)
	}
	p.Limit, p.WorkerID = len(p.WorkerIDs), p.WorkerIDs[0]
	jobs, err := claim(ctx, p)
	if err != nil {
		return nil, err
	}
	if changed := ReassignWorkers(&p, jobs); len(changed) > 0 {
		if err := reassign(ctx, changed); err != nil {
			ReleaseClaimed(ctx, s, jobs)
			return nil, fmt.Errorf("claim jobs from queue %q: record their workers: %w", p.Queue, err)
		}
	}
	return jobs, nil
}

// GetProgressEach is GetProgressBatch for stores that read one job's progress at a time.
func GetProgressEach(ctx context.Context, s ProgressStore, ids []string) (map[string]*Progress, error) {
	out := make(map[string]*Progress)
	for _, id := range ids {
		p, err := s.GetProgress(ctx, id)
		if err != nil {
			return nil, err
		}
		if p != nil {
			out[id] = p
		}
	}
	return out, nil
}

// releaseTimeout bounds ReleaseClaimed.
const releaseTimeout = 5 * time.Second

// ReleaseClaimed returns jobs a claim made active to available with their attempt refunded, for a
// claim that failed, or whose caller left, after it took them: otherwise they would wait out their
// lease. It is best effort: it runs even when ctx has ended, for at most a few seconds, and if it
// fails the jobs come back when their leases expire.
func ReleaseClaimed(ctx context.Context, s Store, jobs []*Job) {
	if len(jobs) == 0 {
		return
	}
	cs := make([]Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: StateAvailable, RefundAttempt: true}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, _ = s.Finish(ctx, cs)
}
