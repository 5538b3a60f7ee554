package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Workflow builds a set of jobs that run in dependency order: a directed acyclic graph of named
// steps, each a job that starts only when the steps it comes after have completed, plus callbacks
// that run once every step has finished. Build one with NewWorkflow (any graph), NewChain (one step
// after another), NewGroup (all at once) or NewBatch (a group with callbacks), then insert it with
// Client.WorkflowInsert: all its jobs are stored in one transaction.
//
// Guarantees, on every store:
//   - A step waits in the pending state until all the steps it comes after have completed. It becomes
//     available in the same transaction that completes the last of them (no polling), with the
//     results of those steps in its ParentResults, in the order its After names them.
//   - When a step is discarded or cancelled, every step that comes after it, directly or not, is
//     cancelled in that same transaction: it can never run.
//   - Callbacks: OnSuccess runs when every step completed, OnFailure when every step has finished and
//     at least one did not complete, OnComplete when every step has finished, whatever the outcome. A
//     callback whose condition is not met is cancelled. Callbacks receive every step's result.
//   - A callback is a job like any other (its retry policy applies) and part of its workflow's
//     outcome: the workflow stays running until the callbacks that run have finished, completes
//     when every step and every callback that ran completed, and fails when a step did not
//     complete or a callback was discarded after its retries. A callback cancelled because its
//     condition was not met is no failure.
//   - A crash at any point loses nothing: the graph lives in the database, and a step rescued after
//     its worker died is retried like any job; its dependents wait for its final outcome.
type Workflow struct {
	id    string
	name  string
	typ   string
	steps []*workflowStep
	names map[string]*workflowStep
	err   error
}

// workflowStep is one job of a workflow under construction.
type workflowStep struct {
	name  string
	job   WorkflowJob
	after []string
	runOn store.RunOn
}

// WorkflowJob is one job of a workflow: typed args with options, or a job in OJS terms.
type WorkflowJob struct {
	Args JobArgs
	Opts *InsertOpts
	// OJS, when set instead of Args, is the job in OJS terms (the HTTP API builds workflows with it).
	OJS *OJSJob
}

// WorkflowInfo is a stored workflow: its name and type, its state, its steps' counts per job state
// (Total and Counts: callbacks are not counted there) and its callbacks' counts (Callbacks). The
// state is running while a step, or a callback that will run, has not finished; then completed
// when every step and every callback that ran completed, failed when a step did not complete or a
// callback was discarded (a callback cancelled because its condition was not met is no failure);
// cancelled once WorkflowCancel cancelled it. FinishedAt is the latest end among its steps and
// callbacks.
type WorkflowInfo = store.Workflow

// WorkflowCallbackCounts counts a workflow's callbacks: all, and those completed, cancelled and
// discarded (WorkflowInfo.Callbacks).
type WorkflowCallbackCounts = store.CallbackCounts

// WorkflowState is a workflow's state.
type WorkflowState = store.WorkflowState

// Workflow states.
const (
	WorkflowRunning   = store.WorkflowRunning
	WorkflowCompleted = store.WorkflowCompleted
	WorkflowFailed    = store.WorkflowFailed
	WorkflowCancelled = store.WorkflowCancelled
)

// NewWorkflow starts an empty workflow of type "dag" named name; add steps with Add or AddJob.
func NewWorkflow(name string) *Workflow {
	return &Workflow{id: uuidv7.New(), name: name, typ: "dag", names: map[string]*workflowStep{}}
}

// NewChain builds a workflow whose jobs run one after another, each receiving the result of the one
// before in ParentResults. A step that fails for good cancels the rest. Steps are named "0", "1", ...
func NewChain(name string, jobs ...WorkflowJob) *Workflow {
	w := NewWorkflow(name)
	w.typ = "chain"
	for i, j := range jobs {
		var after []string
		if i > 0 {
			after = []string{fmt.Sprint(i - 1)}
		}
		w.AddJob(fmt.Sprint(i), j, after...)
	}
	return w
}

// NewGroup builds a workflow whose jobs run independently and at once; it completes when all of them
// completed and fails when all have finished and any did not complete. Steps are named "0", "1", ...
func NewGroup(name string, jobs ...WorkflowJob) *Workflow {
	w := NewWorkflow(name)
	w.typ = "group"
	for i, j := range jobs {
		w.AddJob(fmt.Sprint(i), j)
	}
	return w
}

// NewBatch is NewGroup for a batch: a group meant to carry callbacks (OnSuccess, OnFailure,
// OnComplete).
func NewBatch(name string, jobs ...WorkflowJob) *Workflow {
	w := NewGroup(name, jobs...)
	w.typ = "batch"
	return w
}

// ID is the workflow's id (a UUIDv7), chosen when it was built.
func (w *Workflow) ID() string { return w.id }

// Add adds a step named name running a typed job, after the steps named in after (added earlier).
func (w *Workflow) Add(name string, args JobArgs, opts *InsertOpts, after ...string) *Workflow {
	return w.AddJob(name, WorkflowJob{Args: args, Opts: opts}, after...)
}

// AddJob adds a step named name, after the steps named in after (added earlier). A mistake (an empty
// or repeated name, a callback's name, an unknown step in after) is reported by WorkflowInsert.
func (w *Workflow) AddJob(name string, job WorkflowJob, after ...string) *Workflow {
	if w.err != nil {
		return w
	}
	switch {
	case name == "":
		w.err = invalidf("workflow %q: a step has an empty name", w.name)
	case w.names[name] != nil:
		w.err = invalidf("workflow %q: two steps are named %q", w.name, name)
	case slices.Contains(callbackNames, name):
		// WorkflowInsertResult.Jobs lists callbacks under these names.
		w.err = invalidf("workflow %q: step name %q is reserved for the callback of that name", w.name, name)
	}
	for i, a := range after {
		if w.names[a] == nil || w.names[a].runOn != "" {
			w.err = invalidf("workflow %q: step %q comes after %q, which is not an earlier step", w.name, name, a)
		} else if slices.Contains(after[:i], a) {
			w.err = invalidf("workflow %q: step %q names %q twice among the steps it comes after", w.name, name, a)
		}
	}
	if w.err != nil {
		return w
	}
	s := &workflowStep{name: name, job: job, after: after}
	w.steps = append(w.steps, s)
	w.names[name] = s
	return w
}

// callbackNames are the names WorkflowInsertResult.Jobs gives callbacks; no step may take them.
var callbackNames = []string{"on_success", "on_failure", "on_complete"}

// OnSuccess adds a callback job that runs once every step has completed, those added after it too.
func (w *Workflow) OnSuccess(job WorkflowJob) *Workflow {
	return w.callback("on_success", job, store.RunOnSuccess)
}

// OnFailure adds a callback job that runs once every step (those added after it too) has finished and
// at least one of them was discarded or cancelled.
func (w *Workflow) OnFailure(job WorkflowJob) *Workflow {
	return w.callback("on_failure", job, store.RunOnFailure)
}

// OnComplete adds a callback job that runs once every step (those added after it too) has finished,
// whatever the outcome.
func (w *Workflow) OnComplete(job WorkflowJob) *Workflow {
	return w.callback("on_complete", job, store.RunOnComplete)
}

// callback adds a callback job; WorkflowInsert makes it wait for every member.
func (w *Workflow) callback(name string, job WorkflowJob, on store.RunOn) *Workflow {
	if w.err != nil {
		return w
	}
	for _, s := range w.steps {
		if s.runOn == on {
			w.err = invalidf("workflow %q: %s is set twice", w.name, name)
			return w
		}
	}
	w.steps = append(w.steps, &workflowStep{name: name, job: job, runOn: on})
	return w
}

// WorkflowInsertResult is what WorkflowInsert stored: the workflow and its jobs by step name
// (callbacks under "on_success", "on_failure" and "on_complete").
type WorkflowInsertResult struct {
	Workflow *WorkflowInfo
	Jobs     map[string]*JobRow
	// Order lists the step names in the order they were added.
	Order []string
}

// WorkflowInsert stores w and all its jobs in one transaction: the steps with nothing to wait for
// become available at once, the others wait pending. Its jobs, callbacks included, are inserted as
// any others are: through Config.InsertMiddleware (counted, traced), within queue bounds and tenant
// enqueue limits.
func (c *Client) WorkflowInsert(ctx context.Context, w *Workflow) (*WorkflowInsertResult, error) {
	params, err := c.buildWorkflow(ctx, w)
	if err != nil {
		return nil, err
	}
	var (
		info     *WorkflowInfo
		storeErr error
	)
	jobs, err := c.insert(ctx, params.Jobs, func(ctx context.Context, ps []*store.InsertParams) ([]*JobRow, error) {
		// The steps are wired by id in params order: a middleware may change a job, not the set.
		if len(ps) != len(params.Jobs) {
			return nil, invalidf("the insert middleware gave %d of the workflow's %d jobs", len(ps), len(params.Jobs))
		}
		p := params
		p.Jobs = ps
		var rows []*JobRow
		info, rows, storeErr = c.store.InsertWorkflow(ctx, p)
		return rows, storeErr
	})
	switch {
	case err == nil:
	case storeErr != nil && errors.Is(err, storeErr):
		// The store's refusal, named as a workflow's (an invalid graph, a taken id).
		return nil, wrapOp(fmt.Sprintf("insert workflow %q", w.name), c.schemaCause(ctx, storeErr))
	default:
		return nil, fmt.Errorf("insert workflow %q: %w", w.name, err)
	}
	res := &WorkflowInsertResult{Workflow: info, Jobs: make(map[string]*JobRow, len(jobs))}
	for i, s := range insertOrder(w) {
		res.Jobs[s.name] = jobs[i]
	}
	for _, s := range w.steps {
		res.Order = append(res.Order, s.name)
	}
	return res, nil
}

// insertOrder lists w's steps as they are stored: members in the order they were added, then
// callbacks, which wait for every member, those added after them too.
func insertOrder(w *Workflow) []*workflowStep {
	out := make([]*workflowStep, 0, len(w.steps))
	for _, s := range w.steps {
		if s.runOn == "" {
			out = append(out, s)
		}
	}
	for _, s := range w.steps {
		if s.runOn != "" {
			out = append(out, s)
		}
	}
	return out
}

// buildWorkflow resolves every step into insert params wired by id.
func (c *Client) buildWorkflow(ctx context.Context, w *Workflow) (store.WorkflowParams, error) {
	if w == nil {
		return store.WorkflowParams{}, invalidf("workflow is nil")
	}
	if w.err != nil {
		return store.WorkflowParams{}, w.err
	}
	members := 0
	for _, s := range w.steps {
		if s.runOn == "" {
			members++
		}
	}
	if members == 0 {
		return store.WorkflowParams{}, invalidf("workflow %q has no steps", w.name)
	}
	if err := jsoncheck.CheckString(w.name, "workflow name"); err != nil {
		return store.WorkflowParams{}, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	p := store.WorkflowParams{ID: w.id, Name: w.name, Type: w.typ, Jobs: make([]*store.InsertParams, len(w.steps))}
	ids := make(map[string]string, len(w.steps))
	var memberIDs []string
	order := insertOrder(w)
	for i, s := range order {
		jp, err := c.resolveWorkflowJob(ctx, s.job)
		if err != nil {
			return store.WorkflowParams{}, fmt.Errorf("workflow %q, step %q: %w", w.name, s.name, err)
		}
		if jp.UniqueKey != "" {
			return store.WorkflowParams{}, invalidf("workflow %q, step %q: workflow jobs cannot be unique", w.name, s.name)
		}
		if jp.State == store.StatePending {
			return store.WorkflowParams{}, invalidf("workflow %q, step %q: workflow jobs cannot be inserted pending", w.name, s.name)
		}
		// ojs-multi-tenancy.md §15.2: a workflow belongs to one tenant (or none), every job with it.
		if i > 0 && jp.Tenant != p.Jobs[0].Tenant {
			return store.WorkflowParams{}, invalidf("workflow %q, step %q: tenant %q, but step %q has tenant %q: a workflow's jobs all have one tenant",
				w.name, s.name, jp.Tenant, order[0].name, p.Jobs[0].Tenant)
		}
		jp.WorkflowID, jp.RunOn = w.id, s.runOn
		if s.runOn != "" {
			jp.ParentIDs = memberIDs // every member is resolved: callbacks come last
		} else {
			for _, a := range s.after {
				jp.ParentIDs = append(jp.ParentIDs, ids[a])
			}
			memberIDs = append(memberIDs, jp.ID)
		}
		if len(jp.ParentIDs) > 0 {
			jp.State, jp.ScheduledAt = store.StatePending, time.Time{}
		}
		ids[s.name] = jp.ID
		p.Jobs[i] = jp
	}
	return p, nil
}

// resolveWorkflowJob validates one job of a workflow.
func (c *Client) resolveWorkflowJob(ctx context.Context, j WorkflowJob) (*store.InsertParams, error) {
	switch {
	case j.OJS != nil && j.Args != nil:
		return nil, invalidf("give Args or OJS, not both")
	case j.OJS != nil:
		return c.resolveOJSContext(ctx, *j.OJS)
	default:
		return c.buildInsert(ctx, j.Args, j.Opts)
	}
}

// WorkflowGet returns a workflow's state and counts, or ErrNotFound.
func (c *Client) WorkflowGet(ctx context.Context, id string) (*WorkflowInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	info, err := c.store.GetWorkflow(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("workflow %s", id), err)
	}
	return info, nil
}

// WorkflowJobs lists every job of a workflow (steps and callbacks) in id order: insertion order,
// unless its jobs were given ids (InsertOpts.ID) out of that order.
func (c *Client) WorkflowJobs(ctx context.Context, id string) ([]*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out []*JobRow
	after := ""
	for {
		page, next, err := c.store.ListJobs(ctx, store.ListParams{WorkflowID: id, After: after, Limit: 500})
		if err != nil {
			return nil, wrapOp(fmt.Sprintf("jobs of workflow %s", id), err)
		}
		out = append(out, page...)
		if next == "" {
			break
		}
		after = next
	}
	if len(out) == 0 {
		// Every workflow has jobs: none means no such workflow (or one cleaned up with its jobs).
		if _, err := c.WorkflowGet(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ErrWorkflowFinished is WorkflowCancel's refusal of a workflow that already completed or failed
// (steps and callbacks all finished); errors.As with a *store.WorkflowFinishedError gives the state
// it keeps.
var ErrWorkflowFinished = store.ErrWorkflowFinished

// WorkflowCancel cancels every job of a running workflow that has not finished (running ones are
// told to stop) and marks it cancelled: a workflow whose steps have all finished but whose callback
// has yet to run or finish is running, and its callback is cancelled. Cancelling it again is
// harmless. A workflow that completed or failed (steps and callbacks all finished) stays so, even
// when its last job finishes at the very moment of the call: the cancel is refused with an error
// matching ErrWorkflowFinished. Each job it cancelled is reported once, as
// JobCancel reports one: an EventCancelled from this client, or from the run of the pronto client
// that was running it.
func (c *Client) WorkflowCancel(ctx context.Context, id string) (*WorkflowInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("cancel of workflow %s", id)); err != nil {
		return nil, err
	}
	info, cancelled, err := c.store.CancelWorkflow(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("cancel workflow %s", id), err)
	}
	c.reportCancels(ctx, cancelled, &cancelReporter{c: c})
	return info, nil
}

// ParentResults decodes the results of a workflow job's parents, in the order its step named them
// (one entry per parent; JSON null for a parent that returned no result). A job without parents
// has none.
func ParentResults(row *JobRow) ([]json.RawMessage, error) {
	if row == nil || len(row.ParentResults) == 0 {
		return nil, nil
	}
	var out []json.RawMessage
	if err := json.Unmarshal(row.ParentResults, &out); err != nil {
		return nil, wrapOp(fmt.Sprintf("parent results of job %s", row.ID), err)
	}
	return out, nil
}
