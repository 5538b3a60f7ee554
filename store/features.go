package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file is the contract of the three features built on top of the job lifecycle: unique jobs,
// rate and concurrency limits, and workflows. Every backend implements them with the same semantics
// and proves it with the shared suite (store/storetest).
//
// # Unique jobs
//
// A job inserted with a UniqueKey holds that key while it is in one of its UniqueStates (default
// DefaultUniqueStates) and, when UniqueUntil is set, until then. While a job holds a key, no other job
// can be inserted holding it: the database enforces this (a unique index over the key with the held
// states as its partial condition, or the memory store's lock), so it holds across clients and
// processes with no read-then-write race. When Insert meets a job holding the key of a new job:
//
//   - ConflictReject (the default): the whole Insert call fails with a *UniqueConflictError and
//     inserts nothing (batches stay atomic).
//   - ConflictIgnore: nothing is inserted for that job; Insert returns the existing job in its place,
//     with Duplicate set. The rest of the batch is inserted.
//   - ConflictReplace: the existing job is cancelled (CompletedAt now; an active one's runner is told
//     through NotifyCancel) and the new job is inserted, in the same transaction. An existing job in
//     a terminal state (its UniqueStates include one) is left as it is and gives its key up.
//   - ConflictReplaceExceptSchedule: like ConflictReplace, but when the existing job is scheduled or
//     retryable the new job takes over its state and ScheduledAt, so it runs when the old one would
//     have.
//
// Uniqueness is checked when a job enters the table, and when RetryJob or ActivateJob bring a job
// back into one of its unique states: those two fail with a *UniqueConflictError while another job
// holds the key. Automatic transitions (claim, finish, promote, rescue) never fail for uniqueness: a
// job they move into one of its unique states while another job holds its key gives its key up (its
// UniqueKey reads "" on the database stores).
//
// A job whose UniqueUntil has passed holds its key no more whatever its state: the insert that finds
// it clears that job's UniqueKey (the stored row shows "") and proceeds. Two jobs of one batch with the
// same key meet each other like any two jobs. The key itself is an opaque string computed by the
// client (pronto hashes type, queue, args and meta keys); the store never interprets it.
//
// On Redis (store/redis) a unique key is held within one queue, not across queues: every key of a
// queue lives in that queue's cluster slot, and the holder is found and replaced inside the queue's
// insert script. Two jobs of different queues with the same key do not meet (pronto's client puts
// the queue in the key with ByQueue; without it, uniqueness on Redis is per queue). A batch spanning
// several queues that one queue refuses is undone in the others (the jobs it wrote there are
// deleted, but a job a replace policy cancelled there stays cancelled).
//
// # Rate and concurrency limits
//
// A job with a RateKey is subject to the RateLimit stored under that key, if there is one (a key
// without a stored limit limits nothing). The limit is enforced in Claim, inside the claim's
// transaction, cluster-wide:
//
//   - MaxActive > 0: at most MaxActive jobs with the key are active at once.
//   - Rate > 0 and Period > 0: at most Rate jobs with the key start (are claimed) per window. A window
//     opens at the first claim after the previous one ended and lasts Period. A Rate without a Period
//     (or the reverse) bounds nothing; pronto.Client refuses such a limit before it reaches the store.
//
// A claim skips the jobs whose key is exhausted and takes the next jobs in claim order (priority
// order is kept among the jobs it can take). What happens to a skipped job is its limit's OnLimit:
// LimitWait (default) leaves it as it is, to be claimed when the key has room again; LimitReschedule
// moves it to scheduled at the end of the current window (or one second from now when only MaxActive
// blocks it); LimitDrop discards it with an AttemptError of Type "rate_limited". A claim never returns
// an exhausted key's job, so a limited job never occupies a worker slot while it waits.
//
// NextDue of a queue also reports when the window of an exhausted key with jobs waiting in that queue
// ends, so producers wake for it; Finish announces (NotifyInsert, DueAt zero) the queue of every job
// with a RateKey it moves out of active, so a freed concurrency slot is used at once.
//
// Jobs without a RateKey pay nothing for the feature: their claims take the same plan as before.
//
// On a Redis Cluster a key's limit spans queues, so slots: the limit lives in the key's own slot and
// a claim takes permits from it before it starts the key's jobs (store/redis/ratelimit.go), so that
// claims on different masters never overrun it together.
//
// # Workflows
//
// A workflow is a set of jobs inserted together by InsertWorkflow, whose ParentIDs (ids of other jobs
// of the same call) form a directed acyclic graph. A job with parents is inserted pending and waits;
// a job without parents is inserted in the state its params give (available or scheduled). Each time
// a workflow job reaches a terminal state (completed, cancelled, discarded, by whatever path: Finish,
// CancelJob, CancelWorkflow, Rescue, DiscardExpired, a unique replace), the same transaction looks at
// its pending children and decides each one whose outcome is now known:
//
//   - A member (RunOn ""): released when all its parents completed; cancelled as soon as any parent
//     is cancelled or discarded (it can never run), which in turn decides its own children.
//   - A callback with RunOnSuccess: released when all its parents completed; cancelled as soon as any
//     parent is cancelled or discarded.
//   - A callback with RunOnFailure: once all parents are terminal, released when at least one of them
//     is not completed, cancelled otherwise.
//   - A callback with RunOnComplete: released once all its parents are terminal, whatever they ended
//     as.
//
// Released means: state available, ScheduledAt now, ParentResults set to the parents' results, and
// the queue announced when the transaction commits. Cancelled means state cancelled, CompletedAt now.
// There is no polling step: the child is claimable the moment the parent's transition commits.
//
// One store gives a weaker form of that guarantee, and says so: on a Redis Cluster, a child in another
// queue than its parent is in another slot, which no script can touch with the parent's. There the
// parent's transition writes its outcome, in the same atomic step, into a durable outbox in its own
// queue, and the store delivers it to the child's queue right after (one or two round trips later);
// a process that dies in between leaves the outcome in the outbox, and any process's Rescue delivers
// it. The child is decided exactly as above, once, never lost, but not in the parent's transaction
// (store/redis/relay.go).
//
// The workflow's state is derived from its members and its callbacks (ojs-workflows.md §9.4, §9.5:
// a callback is a job like any other, and its failure fails the workflow): cancelled once
// CancelWorkflow cancelled it while it ran; otherwise running while any member is not terminal or
// any callback that will run (released, or pending: still to be released or cancelled) is not
// terminal; once all are terminal, failed when a member is not completed or a callback was
// discarded, completed otherwise. A callback cancelled because its condition did not hold (or by
// CancelJob) is no failure. So a batch whose members all completed stays running until its
// on_success and on_complete callbacks have finished, and fails when one of them is discarded.
//
// Manual operations stay possible: RetryJob of a discarded member runs it again (children already
// cancelled stay cancelled); ActivateJob of a pending member releases it without its parents (with no
// ParentResults); DeleteJob of a member leaves its children waiting until the workflow is cancelled.

// ErrUniqueConflict matches (errors.Is) a *UniqueConflictError.
var ErrUniqueConflict = errors.New("unique job conflict")

// UniqueConflictError reports that a unique insert met an existing job holding its key and the
// policy was ConflictReject.
type UniqueConflictError struct {
	Key           string
	ExistingID    string
	ExistingState State
}

func (e *UniqueConflictError) Error() string {
	return fmt.Sprintf("unique job conflict: job %s (%s) already holds unique key %s", e.ExistingID, e.ExistingState, e.Key)
}

// Is makes errors.Is(err, ErrUniqueConflict) true.
func (e *UniqueConflictError) Is(target error) bool { return target == ErrUniqueConflict }

// OnConflict is what a unique insert does when an existing job holds its key.
type OnConflict string

// The four conflict policies of the OJS unique-jobs specification.
const (
	ConflictReject                OnConflict = "reject"
	ConflictIgnore                OnConflict = "ignore"
	ConflictReplace               OnConflict = "replace"
	ConflictReplaceExceptSchedule OnConflict = "replace_except_schedule"
)

// Valid reports whether c is one of the four policies ("" counts as ConflictReject).
func (c OnConflict) Valid() bool {
	switch c {
	case "", ConflictReject, ConflictIgnore, ConflictReplace, ConflictReplaceExceptSchedule:
		return true
	}
	return false
}

// DefaultUniqueStates are the states in which a unique job holds its key when its params name none:
// every state that is not terminal.
var DefaultUniqueStates = []State{StateAvailable, StateActive, StateScheduled, StateRetryable, StatePending}

// LimitAction is what a claim does with a job whose rate key is exhausted.
type LimitAction string

// The three OJS on_limit actions.
const (
	LimitWait       LimitAction = "wait"
	LimitReschedule LimitAction = "reschedule"
	LimitDrop       LimitAction = "drop"
)

// RateLimit bounds the jobs sharing a rate key. A zero field bounds nothing.
type RateLimit struct {
	// MaxActive is the most jobs with the key active at once across the cluster.
	MaxActive int
	// Rate is the most jobs with the key started per Period.
	Rate   int
	Period time.Duration
	// OnLimit is what happens to a job the limit holds back ("" means LimitWait).
	OnLimit LimitAction
}

// RateLimitInfo is a limit and its current use.
type RateLimitInfo struct {
	Key   string
	Limit RateLimit
	// Active counts the key's active jobs.
	Active int64
	// WindowStart and WindowCount describe the current rate window (zero when none is open).
	WindowStart time.Time
	WindowCount int64
	// Waiting counts the key's jobs that are available, or scheduled/retryable and due.
	Waiting int64
}

// The strategies a LimitHit names: the bound of a RateLimit that had no room.
const (
	// LimitConcurrency: the key's active jobs reached MaxActive.
	LimitConcurrency = "concurrency"
	// LimitRate: the key's starts in the current window reached Rate.
	LimitRate = "rate"
)

// LimitHit is a rate key whose limit had no room for a job a claim would otherwise have taken
// (ClaimParams.OnLimited): the bound that stopped it (LimitRate when the current window is spent,
// else LimitConcurrency), that bound's value, and the key's use of it as the claim saw it.
type LimitHit struct {
	Key      string
	Strategy string
	// Limit is the bound: MaxActive, or Rate (per Period).
	Limit int
	// Current is the key's active jobs, or the starts counted in its current window.
	Current int64
	// HasRoom is set on a key named only because the claim took jobs of it and more of them wait,
	// its limit still having room (the claim took fewer than it could): the key is not limiting
	// them now, but its backlog is not gone. Strategy, Limit and Current are then unset.
	HasRoom bool
}

// NewLimitHit describes key's exhausted limit l from its active jobs and the starts counted in its
// current window (0 when none is open), the same way on every store: the spent window first.
func NewLimitHit(key string, l RateLimit, active, windowCount int64) LimitHit {
	if l.Rate > 0 && l.Period > 0 && windowCount >= int64(l.Rate) {
		return LimitHit{Key: key, Strategy: LimitRate, Limit: l.Rate, Current: windowCount}
	}
	return LimitHit{Key: key, Strategy: LimitConcurrency, Limit: l.MaxActive, Current: active}
}

// AddLimitHit appends h to hits unless a hit of its key is there already; a hit without room
// replaces one with HasRoom.
func AddLimitHit(hits []LimitHit, h LimitHit) []LimitHit {
	for i, x := range hits {
		if x.Key == h.Key {
			if x.HasRoom && !h.HasRoom {
				hits[i] = h
			}
			return hits
		}
	}
	return append(hits, h)
}

// RateLimiter is the part of Store that manages the stored limits Claim enforces.
type RateLimiter interface {
	// SetRateLimit creates or replaces the limit stored under key and wakes the producers of every
	// queue (the new limit may allow more).
	SetRateLimit(ctx context.Context, key string, l RateLimit) error
	// GetRateLimit returns the limit under key with its use, or ErrNotFound.
	GetRateLimit(ctx context.Context, key string) (*RateLimitInfo, error)
	// ListRateLimits returns every stored limit with its use, in key order.
	ListRateLimits(ctx context.Context) ([]*RateLimitInfo, error)
	// DeleteRateLimit removes the limit under key (its jobs become unlimited), or returns ErrNotFound.
	DeleteRateLimit(ctx context.Context, key string) error
}

// RunOn is the outcome of its parents that releases a workflow callback.
type RunOn string

// Callback conditions (see the Workflows section above).
const (
	RunOnSuccess  RunOn = "success"
	RunOnFailure  RunOn = "failure"
	RunOnComplete RunOn = "complete"
)

// WorkflowState is a workflow's derived state.
type WorkflowState string

// Workflow states.
const (
	WorkflowRunning   WorkflowState = "running"
	WorkflowCompleted WorkflowState = "completed"
	WorkflowFailed    WorkflowState = "failed"
	WorkflowCancelled WorkflowState = "cancelled"
)

// WorkflowParams is a workflow to insert with its jobs.
type WorkflowParams struct {
	// ID is a lowercase UUIDv7 chosen by the client.
	ID string
	// Name is free text; Type is "chain", "group", "batch" or "dag" (the store keeps it as given).
	Name string
	Type string
	// Meta is a JSON object, or nil.
	Meta json.RawMessage
	// Jobs are the workflow's jobs, members and callbacks. Each has WorkflowID equal to ID; its
	// ParentIDs name jobs of this list that appear before it (so the graph is acyclic); a job with
	// parents has State pending; a callback (RunOn set) has parents. None may set UniqueKey.
	Jobs []*InsertParams
}

// Workflow is a stored workflow with its members' progress.
type Workflow struct {
	ID   string
	Name string
	Type string
	Meta json.RawMessage
	// State is derived as described in the Workflows section.
	State WorkflowState
	// Total counts the members (callbacks excluded); Counts counts them per state, with every one of
	// the eight states present (zero included), as the HTTP API shows them.
	Total  int
	Counts map[State]int
	// Callbacks counts the callbacks (RunOn set) by outcome; they count in State too.
	Callbacks CallbackCounts
	// CreatedAt is when it was inserted; CancelledAt when CancelWorkflow was called (zero if never);
	// FinishedAt, once it is not running, the latest CompletedAt of its members and callbacks (or
	// CancelledAt).
	CreatedAt   time.Time
	CancelledAt time.Time
	FinishedAt  time.Time
}

// CallbackCounts counts a workflow's callbacks: all of them, and those that ended each way.
type CallbackCounts struct {
	Total, Completed, Cancelled, Discarded int
}

// Open counts the callbacks not terminal: pending (their parents not all decided yet), or released
// and not finished. Each of them will run, or be cancelled when its condition does not hold.
func (c CallbackCounts) Open() int {
	return max(c.Total-c.Completed-c.Cancelled-c.Discarded, 0)
}

// Workflows is the part of Store that inserts, reads and cancels workflows.
type Workflows interface {
	// InsertWorkflow stores the workflow and all its jobs atomically (an invalid graph inserts nothing
	// and wraps ErrInvalidParams; an existing workflow or job id wraps ErrDuplicate), announces the
	// queues of the jobs claimable now, and returns the workflow and the jobs in params order.
	InsertWorkflow(ctx context.Context, p WorkflowParams) (*Workflow, []*Job, error)
	// GetWorkflow returns one workflow, or ErrNotFound.
	GetWorkflow(ctx context.Context, id string) (*Workflow, error)
	// CancelWorkflow cancels every job of the workflow that is not terminal (members and callbacks;
	// active ones are told through NotifyCancel), marks it cancelled, and returns it with the jobs
	// this call cancelled, in id order, each as it was just before: its state then, and for an
	// active one the WorkerID and ClaimToken of the run it stopped (the caller reports the cancels
	// no run reports). Cancelling a workflow twice is not an error (the second cancels nothing that
	// stayed cancelled); ErrNotFound if there is none. A workflow already completed or failed is
	// left as it is and refused with a *WorkflowFinishedError (ErrWorkflowFinished), decided in the
	// same step as the cancel, so a cancel racing the last outcome never turns it cancelled. A
	// workflow whose members finished but whose callback has yet to run or finish is running: the
	// cancel cancels that callback.
	CancelWorkflow(ctx context.Context, id string) (*Workflow, []*Job, error)
	// WorkflowLister: one page of workflows at a time (see clients.go).
	WorkflowLister
}

// DeriveWorkflowState is the rule every store applies to compute a workflow's state from its member
// counts, its callback counts and whether it was cancelled (see the Workflows section above).
func DeriveWorkflowState(cancelled bool, total int, counts map[State]int, callbacks CallbackCounts) WorkflowState {
	if cancelled {
		return WorkflowCancelled
	}
	terminal := counts[StateCompleted] + counts[StateCancelled] + counts[StateDiscarded]
	switch {
	case terminal < total || callbacks.Open() > 0:
		return WorkflowRunning
	case counts[StateCompleted] == total && callbacks.Discarded == 0:
		return WorkflowCompleted
	default:
		return WorkflowFailed
	}
}

// ValidateWorkflow checks the shape rules of WorkflowParams that need no database: ids, parents
// inside the workflow and earlier in the list, pending state for jobs with parents, callbacks with
// parents, no unique keys. Every store calls it first.
func ValidateWorkflow(p WorkflowParams) error {
	if p.ID == "" {
		return fmt.Errorf("%w: workflow id is empty", ErrInvalidParams)
	}
	if len(p.Jobs) == 0 {
		return fmt.Errorf("%w: workflow %s has no jobs", ErrInvalidParams, p.ID)
	}
	seen := make(map[string]bool, len(p.Jobs))
	members := 0
	for i, j := range p.Jobs {
		if j.WorkflowID != p.ID {
			return fmt.Errorf("%w: job %d (%s) has workflow id %q, want %q", ErrInvalidParams, i, j.ID, j.WorkflowID, p.ID)
		}
		if seen[j.ID] {
			return fmt.Errorf("%w: job id %s appears twice in workflow %s", ErrInvalidParams, j.ID, p.ID)
		}
		if j.UniqueKey != "" {
			return fmt.Errorf("%w: job %d (%s) of workflow %s has a unique key; workflow jobs cannot be unique", ErrInvalidParams, i, j.ID, p.ID)
		}
		for k, pid := range j.ParentIDs {
			if !seen[pid] {
				return fmt.Errorf("%w: job %d (%s) names parent %s, which is not an earlier job of workflow %s", ErrInvalidParams, i, j.ID, pid, p.ID)
			}
			if slices.Contains(j.ParentIDs[:k], pid) {
				return fmt.Errorf("%w: job %d (%s) names parent %s twice", ErrInvalidParams, i, j.ID, pid)
			}
		}
		switch j.RunOn {
		case "":
			members++
		case RunOnSuccess, RunOnFailure, RunOnComplete:
			if len(j.ParentIDs) == 0 {
				return fmt.Errorf("%w: callback job %d (%s) of workflow %s has no parents", ErrInvalidParams, i, j.ID, p.ID)
			}
		default:
			return fmt.Errorf("%w: job %d (%s) has run-on %q; want success, failure or complete", ErrInvalidParams, i, j.ID, j.RunOn)
		}
		if len(j.ParentIDs) > 0 && j.State != StatePending {
			return fmt.Errorf("%w: job %d (%s) has parents, so it must be inserted pending, not %s", ErrInvalidParams, i, j.ID, j.State)
		}
		seen[j.ID] = true
	}
	if members == 0 {
		return fmt.Errorf("%w: workflow %s has only callbacks", ErrInvalidParams, p.ID)
	}
	return nil
}

// ValidatePlainInsert rejects workflow fields on a job given to Insert rather than InsertWorkflow.
func ValidatePlainInsert(p *InsertParams) error {
	if p.WorkflowID != "" || len(p.ParentIDs) > 0 || p.RunOn != "" {
		return fmt.Errorf("%w: job %s sets workflow fields; insert workflow jobs with InsertWorkflow", ErrInvalidParams, p.ID)
	}
	if !p.OnConflict.Valid() {
		return fmt.Errorf("%w: job %s has on-conflict policy %q", ErrInvalidParams, p.ID, p.OnConflict)
	}
	return nil
}

// UniqueStatesOrDefault returns states, or DefaultUniqueStates when it is empty.
func UniqueStatesOrDefault(states []State) []State {
	if len(states) == 0 {
		return DefaultUniqueStates
	}
	return states
}
