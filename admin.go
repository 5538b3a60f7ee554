package pronto

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// QueueInfo is a queue's pause flag and job counts per state.
type QueueInfo = store.QueueInfo

// JobListParams filters and pages JobList. The zero value lists the first 100 jobs in id (creation)
// order.
type JobListParams struct {
	States []State
	Queues []string
	Kinds  []string
	// Tags, when not empty, lists only jobs that have every one of these tags (and maybe others).
	Tags []string
	// Tenant, when set, lists only that tenant's jobs (InsertOpts.Tenant), across queues. The stores
	// read an index of the tenant's own jobs, so a small tenant's page costs the same beside a large
	// tenant's backlog (a Redis Cluster keeps one per queue and merges them).
	Tenant string
	// Cursor continues a listing from JobListResult.Next.
	Cursor string
	// Descending lists newest first.
	Descending bool
	// Limit is the page size (default 100, at most 10000).
	Limit int
	// CreatedAfter and CreatedBefore, when set, list only jobs created at or after CreatedAfter and
	// before CreatedBefore, to the millisecond, as their UUIDv7 id records it (a job inserted with
	// InsertOpts.ID counts from the time in that id). The bounds are a range of the id order, so a
	// page costs the same with them as without, on a table of any size.
	CreatedAfter, CreatedBefore time.Time
	// FinishedAfter and FinishedBefore, when set, list only finished jobs (completed, cancelled or
	// discarded) whose finish time is at or after FinishedAfter and before FinishedBefore.
	FinishedAfter, FinishedBefore time.Time
}

// JobListResult is one page of jobs.
type JobListResult struct {
	Jobs []*JobRow
	// Next is the cursor of the next page, "" on the last page.
	Next string
}

func checkID(id string) error {
	if !uuidv7.Valid(id) {
		return invalidf("job id %q: must be a lowercase UUIDv7", id)
	}
	return nil
}

// JobGet returns a job, or an error matching ErrNotFound.
func (c *Client) JobGet(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	j, err := c.store.GetJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("get job %s", id), err)
	}
	return c.withProgress(ctx, j)
}

// JobList lists jobs matching the filters, one page at a time.
func (c *Client) JobList(ctx context.Context, p *JobListParams) (*JobListResult, error) {
	if p == nil {
		p = &JobListParams{}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if limit > 10000 {
		return nil, invalidf("list limit %d: at most 10000", limit)
	}
	for _, s := range p.States {
		if !s.Valid() {
			return nil, invalidf("unknown state %q", s)
		}
	}
	// A filter by a name no job can have is a mistake, not an empty page.
	for _, q := range p.Queues {
		if !ValidQueueName(q) {
			return nil, invalidf("queue name %q: must be %s", q, QueueNameRule)
		}
	}
	for _, k := range p.Kinds {
		if !ValidKind(k) {
			return nil, invalidf("kind %q: must be %s", k, KindRule)
		}
	}
	if p.Tenant != "" {
		if err := validTenantArg(p.Tenant); err != nil {
			return nil, err
		}
	}
	if p.Cursor != "" {
		if err := checkID(p.Cursor); err != nil {
			return nil, invalidf("cursor %q is not a job id", p.Cursor)
		}
	}
	jobs, next, err := c.store.ListJobs(ctx, store.ListParams{
		States: p.States, Queues: p.Queues, Kinds: p.Kinds, Tags: p.Tags, Tenant: p.Tenant, After: p.Cursor, Descending: p.Descending, Limit: limit,
		CreatedAfter: p.CreatedAfter, CreatedBefore: p.CreatedBefore, FinishedAfter: p.FinishedAfter, FinishedBefore: p.FinishedBefore,
	})
	if err != nil {
		return nil, wrapOp("list jobs", err)
	}
	return &JobListResult{Jobs: jobs, Next: next}, nil
}

// JobCancel cancels a job that has not finished: a queued job never runs, and a running one has its
// context cancelled (cause ErrJobCancelled) on whichever client runs it. A finished job gives an error
// matching ErrInvalidTransition.
func (c *Client) JobCancel(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("cancel of job %s", id)); err != nil {
		return nil, err
	}
	prev, _ := c.store.GetJob(ctx, id)
	if prev != nil && prev.State == store.StateActive {
		// A report an OJS worker sent through this server in the last second is written while its
		// claim still holds the job, so the cancelled attempt keeps it (ojs-progress.md 8.2).
		c.endRemoteProgress(id, prev.ClaimToken)
	}
	j, err := c.store.CancelJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("cancel job %s", id), err)
	}
	// When this client runs it, its run stops now rather than when the notification comes back (a
	// prefetched run then never starts).
	if prev != nil && prev.State == store.StateActive {
		c.cancelLocal(id, prev.ClaimToken)
	}
	if c.events.wants(EventCancelled) && (prev == nil || !(&cancelReporter{c: c}).reportedByRun(ctx, prev)) {
		c.events.emit(&Event{Kind: EventCancelled, Job: j, At: time.Now()})
	}
	return j, nil
}

// cancelReporter tells who reports a cancelled job's EventCancelled. A pronto client's run reports
// its own when it stops (this client's, or a live client's elsewhere, told through the store); the
// client that cancelled reports every other job: a queued one, and one an OJS worker fetched (which
// learns of it on its next heartbeat, and that reports nothing). So each cancel is counted once,
// in one process.
type cancelReporter struct {
	c *Client
	// clients are the ids of the store's live clients, read when first needed.
	clients map[string]bool
}

// reportCancels stops this client's runs of the jobs a store call cancelled (prevs, each as it was
// just before) now rather than when the notification comes back, and emits EventCancelled for each
// one no run reports (see rep).
func (c *Client) reportCancels(ctx context.Context, prevs []*JobRow, rep *cancelReporter) {
	now := time.Now()
	for _, prev := range prevs {
		if prev.State == store.StateActive && prev.WorkerID == c.cfg.ID {
			c.cancelLocal(prev.ID, prev.ClaimToken)
		}
		if !c.events.wants(EventCancelled) || rep.reportedByRun(ctx, prev) {
			continue
		}
		out := *prev
		out.State, out.CompletedAt, out.WorkerID, out.LeaseExpiresAt, out.ClaimToken = store.StateCancelled, now, "", time.Time{}, ""
		c.events.emit(&Event{Kind: EventCancelled, Job: &out, At: now})
	}
}

// reportedByRun reports whether a run reports the cancel of prev, the job as it was when cancelled.
func (r *cancelReporter) reportedByRun(ctx context.Context, prev *JobRow) bool {
	if prev.State != store.StateActive || prev.WorkerID == "" {
		return false
	}
	if prev.WorkerID == r.c.cfg.ID {
		return true
	}
	if r.clients == nil {
		r.clients = map[string]bool{}
		// A registry that does not answer leaves the report here: an OJS worker is then the likelier
		// holder than a client started elsewhere, and a count too many beats one lost.
		list, _ := r.c.ClientList(ctx)
		for _, ci := range list {
			r.clients[ci.ID] = true
		}
	}
	return r.clients[prev.WorkerID]
}

// JobRetry makes a discarded or cancelled job available again, its attempts reset and its error
// history kept. A workflow step whose parents have not all finished (none failed) goes back to
// pending instead, to run when they do. Other states give an error matching ErrInvalidTransition.
func (c *Client) JobRetry(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("retry of job %s", id)); err != nil {
		return nil, err
	}
	var from State
	if c.events.wants(EventRetried) {
		if prev, err := c.store.GetJob(ctx, id); err == nil {
			from = prev.State // for subscribers that tell dead-letter retries apart
		}
	}
	j, err := c.store.RetryJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("retry job %s", id), err)
	}
	c.events.emit(&Event{Kind: EventRetried, Job: j, At: time.Now(), From: from})
	return j, nil
}

// JobActivate moves a pending job (inserted with InsertOpts.Pending) to available.
func (c *Client) JobActivate(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("activation of job %s", id)); err != nil {
		return nil, err
	}
	j, err := c.store.ActivateJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("activate job %s", id), err)
	}
	return j, nil
}

// JobRunNow makes a scheduled job, or a retryable one waiting for its next attempt, available now:
// it runs as soon as a worker is free, keeping the attempts it used. Other states give an error
// matching ErrInvalidTransition (a pending job is released with JobActivate).
func (c *Client) JobRunNow(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("run now of job %s", id)); err != nil {
		return nil, err
	}
	j, err := c.store.RunJobNow(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("run job %s now", id), err)
	}
	return j, nil
}

// JobSetPriority sets the priority of a job waiting to run (available, scheduled or pending) and
// returns the job with the priority it had: an available job is claimed in its new order from then
// on, a scheduled or pending one once it becomes available. priority must be between PriorityMin
// and PriorityMax (ParsePriority reads the names high, normal and low); it is stored as given, a
// tenant's priority boost applying at insert only. A running, retryable or finished job gives an
// error matching ErrInvalidTransition (OJS forbids changing a retryable job's priority); an
// unknown one ErrNotFound. Subscribers receive EventPriorityChanged.
func (c *Client) JobSetPriority(ctx context.Context, id string, priority int) (*JobRow, int, error) {
	if err := checkID(id); err != nil {
		return nil, 0, err
	}
	if priority < PriorityMin || priority > PriorityMax {
		return nil, 0, invalidf("priority %d: must be between %d and %d", priority, PriorityMin, PriorityMax)
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("priority change of job %s", id)); err != nil {
		return nil, 0, err
	}
	j, prev, err := c.store.SetJobPriority(ctx, id, priority)
	if err != nil {
		return nil, 0, wrapOp(fmt.Sprintf("set the priority of job %s", id), err)
	}
	c.events.emit(&Event{Kind: EventPriorityChanged, Job: j, At: time.Now(), PreviousPriority: prev})
	return j, prev, nil
}

// JobDelete removes a job that is not running and returns it as it was. Cancel a running job first.
// A finished workflow job that a pending job of its workflow still waits for is refused too (an
// error matching ErrInvalidTransition, saying so): that job is released by its parents' outcomes
// and reads their results. Cancel the workflow, or the waiting job, first.
func (c *Client) JobDelete(ctx context.Context, id string) (*JobRow, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("delete of job %s", id)); err != nil {
		return nil, err
	}
	j, err := c.store.DeleteJob(ctx, id)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("delete job %s", id), err)
	}
	return j, nil
}

// QueueList returns every queue with jobs or a pause flag, with counts per state.
//
// Counting is a pass over every job on PostgreSQL and SQLite, which the dashboard (every second
// while watched), the metrics and the API ask for again and again; on a table of millions of jobs
// it takes seconds. So its cost is bounded: once a count of 100,000 jobs or more takes 50 ms or
// more, its counts answer the calls of the next 20 times as long (at most a minute), and
// concurrent calls share one count, so counting keeps a database connection busy about 5% of the
// time at most, and the counts are at most that old. Any other count is never reused: with fewer
// jobs (however slow the machine) each call counts afresh and sees every write made before it.
func (c *Client) QueueList(ctx context.Context) ([]QueueInfo, error) {
	qs, err := c.queueCounts.Get(ctx)
	if err != nil {
		return nil, wrapOp("list queues", err)
	}
	return qs, nil
}

// Bounds of a costly queue count (QueueList).
const (
	costlyCountJobs = 100_000
	costlyCountTook = 50 * time.Millisecond
)

// costlyQueueCount says whether a count of qs that took took is reused (QueueList).
func costlyQueueCount(qs []QueueInfo, took time.Duration) bool {
	if took < costlyCountTook {
		return false
	}
	var n int64
	for _, q := range qs {
		for _, c := range q.Counts {
			n += c
		}
	}
	return n >= costlyCountJobs
}

// cloneQueueInfos copies qs, so that no caller's changes reach a reused count.
func cloneQueueInfos(qs []QueueInfo) []QueueInfo {
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		out[i] = q
		out[i].Counts = maps.Clone(q.Counts)
	}
	return out
}

// QueueAvailableByPriority returns how many available jobs of queue wait at each priority
// (ojs-priority.md §10.3's priority distribution); priorities without any are absent. The stores
// read the queue's claim index or ready sets rather than every job (the memory store walks its
// jobs), but it is meant for dashboards and operators, not hot paths.
// The store must implement store.PriorityCounter (all of pronto's stores do).
func (c *Client) QueueAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error) {
	if !ValidQueueName(queue) {
		return nil, invalidf("queue name %q: must be %s", queue, QueueNameRule)
	}
	pc, ok := c.store.(store.PriorityCounter)
	if !ok {
		return nil, fmt.Errorf("pronto: %T counts no jobs by priority (store.PriorityCounter): %w", c.store, ErrUnsupported)
	}
	counts, err := pc.CountAvailableByPriority(ctx, queue)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("count the available jobs of queue %q by priority", queue), err)
	}
	return counts, nil
}

// QueuePause stops every client in the cluster from claiming the queue's jobs (running ones finish).
// The jobs a client claimed ahead of its workers (QueueConfig.Prefetch) and has not started do not
// start: each is marked to be given back (to available, its attempt refunded) by this client before
// QueuePause returns and by the others when the pause's notification reaches them (a store without
// notifications across processes, such as SQLite shared by several, leaves theirs to start). The
// give-back itself is written as soon as one of the queue's workers is free (the queue's running jobs
// finish first): until then they stay active, held by the client. Inserts into a paused queue still
// succeed.
func (c *Client) QueuePause(ctx context.Context, queue string) error {
	if !ValidQueueName(queue) {
		return invalidf("queue name %q: must be %s", queue, QueueNameRule)
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("pause of queue %q", queue)); err != nil {
		return err
	}
	if err := c.store.PauseQueue(ctx, queue); err != nil {
		return wrapOp(fmt.Sprintf("pause queue %q", queue), err)
	}
	// This client's jobs claimed ahead of its workers are marked before it returns, and go back
	// as its workers free; other clients mark theirs when the pause notification reaches them.
	c.giveBackQueued(queue, errQueuePaused)
	return nil
}

// QueueResume lets the cluster claim the queue's jobs again, at once.
func (c *Client) QueueResume(ctx context.Context, queue string) error {
	if !ValidQueueName(queue) {
		return invalidf("queue name %q: must be %s", queue, QueueNameRule)
	}
	if err := c.haltRefusal(ctx, fmt.Sprintf("resume of queue %q", queue)); err != nil {
		return err
	}
	if err := c.store.ResumeQueue(ctx, queue); err != nil {
		return wrapOp(fmt.Sprintf("resume queue %q", queue), err)
	}
	return nil
}

// WorkflowListParams pages WorkflowList. The zero value lists the newest 50 workflows.
type WorkflowListParams struct {
	// Cursor continues a listing from WorkflowListResult.Next.
	Cursor string
	// Ascending lists oldest first (default: newest first).
	Ascending bool
	// Limit is the page size (default 50, at most 1000).
	Limit int
}

// WorkflowListResult is one page of workflows.
type WorkflowListResult struct {
	Workflows []*WorkflowInfo
	// Next is the cursor of the next page, "" on the last page.
	Next string
}

// WorkflowList lists workflows by id (creation order), newest first unless p.Ascending, one page
// at a time, each with its state and counts as WorkflowGet gives them.
func (c *Client) WorkflowList(ctx context.Context, p *WorkflowListParams) (*WorkflowListResult, error) {
	if p == nil {
		p = &WorkflowListParams{}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 1000 {
		return nil, invalidf("workflow list limit %d: at most 1000", limit)
	}
	if p.Cursor != "" && !uuidv7.Valid(p.Cursor) {
		return nil, invalidf("cursor %q is not a workflow id", p.Cursor)
	}
	ws, next, err := c.store.ListWorkflows(ctx, store.WorkflowListParams{After: p.Cursor, Ascending: p.Ascending, Limit: limit})
	if err != nil {
		return nil, wrapOp("list workflows", err)
	}
	return &WorkflowListResult{Workflows: ws, Next: next}, nil
}
