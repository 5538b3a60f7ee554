package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// node links a workflow job to its workflow and to the jobs of its graph.
type node struct {
	wf                *workflow
	parents, children []*job
}

// workflow is a stored workflow. Its member counts are kept by place and unplace, so reading it
// costs nothing per job. It lives while any of its jobs is stored: when Cleanup or DeleteJob removes
// the last one, the workflow goes too.
type workflow struct {
	id, name, typ string
	meta          json.RawMessage
	createdAt     time.Time
	cancelledAt   time.Time
	// lastDone is the latest CompletedAt a member or callback reached.
	lastDone time.Time
	// counts counts the members (callbacks excluded) per state; callbacks counts the callbacks.
	counts    [8]int
	callbacks [8]int
	// jobs are the workflow's jobs in insertion order, stored or deleted; stored counts the former.
	jobs   []*job
	stored int
}

// placed counts member or callback j in its state; place calls it.
func (w *workflow) placed(j *job) {
	if j.RunOn == "" {
		w.counts[stateIndex(j.State)]++
	} else {
		w.callbacks[stateIndex(j.State)]++
	}
	if j.State.Terminal() && j.CompletedAt.After(w.lastDone) {
		w.lastDone = j.CompletedAt
	}
}

// unplaced uncounts member or callback j; unplace calls it.
func (w *workflow) unplaced(j *job) {
	if j.RunOn == "" {
		w.counts[stateIndex(j.State)]--
	} else {
		w.callbacks[stateIndex(j.State)]--
	}
}

// export returns the workflow as the store.Workflows interface reports it.
func (w *workflow) export() *store.Workflow {
	counts := make(map[store.State]int, len(store.AllStates))
	total := 0
	for i, st := range store.AllStates {
		counts[st] = w.counts[i]
		total += w.counts[i]
	}
	cb := store.CallbackCounts{
		Completed: w.callbacks[stateIndex(store.StateCompleted)],
		Cancelled: w.callbacks[stateIndex(store.StateCancelled)],
		Discarded: w.callbacks[stateIndex(store.StateDiscarded)],
	}
	for _, n := range w.callbacks {
		cb.Total += n
	}
	out := &store.Workflow{
		ID: w.id, Name: w.name, Type: w.typ, Meta: cloneRaw(w.meta),
		Total: total, Counts: counts, Callbacks: cb, CreatedAt: w.createdAt, CancelledAt: w.cancelledAt,
	}
	out.State = store.DeriveWorkflowState(!w.cancelledAt.IsZero(), total, counts, cb)
	if out.State != store.WorkflowRunning {
		out.FinishedAt = w.lastDone
		if w.cancelledAt.After(out.FinishedAt) {
			out.FinishedAt = w.cancelledAt
		}
		if out.FinishedAt.IsZero() { // every member deleted before finishing
			out.FinishedAt = w.createdAt
		}
	}
	return out
}

// waited reports whether a pending child of workflow job j still waits for it: Cleanup and
// PruneDiscarded keep such a job, as the database stores do, so that the job a child's
// ParentResults came from stays readable until the child is released. s.mu must be held.
func (s *Store) waited(j *job) bool {
	if j.node == nil {
		return false
	}
	for _, c := range j.node.children {
		if s.jobs[c.ID] == c && c.State == store.StatePending {
			return true
		}
	}
	return false
}

// forgetMember accounts for the deletion of workflow job j; s.mu must be held.
func (s *Store) forgetMember(j *job) {
	w := j.node.wf
	w.stored--
	if w.stored == 0 && s.workflows[w.id] == w {
		delete(s.workflows, w.id)
	}
}

// workflowIDs returns the ids of the stored jobs of workflow id, sorted; s.mu must be held.
func (s *Store) workflowIDs(id string) []string {
	w := s.workflows[id]
	if w == nil {
		return nil
	}
	ids := make([]string, 0, w.stored)
	for _, j := range w.jobs {
		if s.jobs[j.ID] == j {
			ids = append(ids, j.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// InsertWorkflow stores the workflow and its jobs atomically and announces the queues of the jobs
// claimable now. An invalid graph wraps store.ErrInvalidParams, an existing workflow or job id
// store.ErrDuplicate; either way nothing is stored.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for _, jp := range p.Jobs {
		if err := validInsert(jp); err != nil { // before ValidateWorkflow, which needs no nil jobs
			return nil, nil, fmt.Errorf("memory: insert workflow %s: %w", p.ID, err)
		}
	}
	if err := store.ValidateWorkflow(p); err != nil {
		return nil, nil, fmt.Errorf("memory: insert workflow: %w", err)
	}
	jobs := linkWorkflow(p.Jobs)

	s.mu.Lock()
	if s.workflows[p.ID] != nil {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("memory: insert workflow %s: %w", p.ID, store.ErrDuplicate)
	}
	for _, j := range jobs {
		if s.jobs[j.ID] != nil {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("memory: insert workflow %s: job %s: %w", p.ID, j.ID, store.ErrDuplicate)
		}
	}
	now := time.Now()
	w := &workflow{id: p.ID, name: p.Name, typ: p.Type, meta: cloneRaw(p.Meta), createdAt: now, jobs: jobs, stored: len(jobs)}
	a := announcer{now: now}
	out := make([]*store.Job, len(jobs))
	for i, j := range jobs {
		j.CreatedAt = now
		if j.ScheduledAt.IsZero() {
			j.ScheduledAt = now
		}
		j.node.wf = w
		if l := p.Jobs[i].RateLimit; l != nil {
			s.rateKey(j.RateKey).setLimit(*l)
		}
		s.add(j)
		if announces(j.State) {
			a.add(j)
		}
		out[i] = j.export()
	}
	s.workflows[p.ID] = w
	wout := w.export()
	s.mu.Unlock()
	s.publish(a.ns)
	return wout, out, nil
}

// linkWorkflow makes the jobs of a validated workflow, each linked to its parents and children.
func linkWorkflow(params []*store.InsertParams) []*job {
	jobs := make([]*job, len(params))
	byID := make(map[string]*job, len(params))
	for i, jp := range params {
		j := newJob(jp)
		j.node = &node{}
		for _, pid := range jp.ParentIDs {
			parent := byID[pid]
			j.node.parents = append(j.node.parents, parent)
			parent.node.children = append(parent.node.children, j)
		}
		byID[j.ID] = j
		jobs[i] = j
	}
	return jobs
}

// GetWorkflow returns workflow id, or an error matching store.ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workflows[id]
	if w == nil {
		return nil, workflowNotFound(id)
	}
	return w.export(), nil
}

func workflowNotFound(id string) error {
	return fmt.Errorf("memory: workflow %s: %w", id, store.ErrNotFound)
}

// CancelWorkflow cancels every job of the workflow that is not terminal, telling the runners of
// active ones, and marks the workflow cancelled (the first call's time stays). It returns the jobs it
// cancelled as they were before. A completed or failed workflow (members and callbacks terminal) is
// left so: an error matching store.ErrWorkflowFinished.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, []*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	w := s.workflows[id]
	if w == nil {
		s.mu.Unlock()
		return nil, nil, workflowNotFound(id)
	}
	if err := store.CancelRefusal(id, w.export().State); err != nil {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("memory: cancel workflow: %w", err)
	}
	now := time.Now()
	if w.cancelledAt.IsZero() {
		w.cancelledAt = now
	}
	var (
		cancels   []store.Notification
		cancelled []*store.Job
	)
	for _, j := range w.jobs {
		if s.jobs[j.ID] == j && !j.State.Terminal() {
			cancelled = append(cancelled, j.export())
			s.cancel(j, now, &cancels)
		}
	}
	a := announcer{now: now}
	s.settle(now, &a)
	out := w.export()
	s.mu.Unlock()
	s.publish(cancels)
	s.publish(a.ns)
	slices.SortFunc(cancelled, func(a, b *store.Job) int { return strings.Compare(a.ID, b.ID) })
	return out, cancelled, nil
}

// outcome is what a pending workflow job's parents decide for it.
type outcome int

const (
	outcomeWait outcome = iota
	outcomeRelease
	outcomeCancel
)

// decide applies the rule of the job's RunOn to its parents' states.
func decide(c *job) outcome {
	terminal, completed := 0, 0
	for _, p := range c.node.parents {
		if p.State.Terminal() {
			terminal++
			if p.State == store.StateCompleted {
				completed++
			}
		}
	}
	all, failed := terminal == len(c.node.parents), terminal > completed
	switch c.RunOn {
	case store.RunOnFailure:
		switch {
		case !all:
			return outcomeWait
		case failed:
			return outcomeRelease
		}
		return outcomeCancel
	case store.RunOnComplete:
		if all {
			return outcomeRelease
		}
		return outcomeWait
	}
	// Members and success callbacks.
	switch {
	case failed:
		return outcomeCancel
	case all:
		return outcomeRelease
	}
	return outcomeWait
}

// settle decides the pending children of the workflow jobs that became terminal (s.decided), and of
// the children it cancels in turn, and then deletes the oldest finished jobs beyond the store's bound
// (trimFinished). Released children are announced through a. s.mu must be held; every operation that
// can end a job calls it before unlocking.
func (s *Store) settle(now time.Time, a *announcer) {
	if len(s.decided) > 0 {
		s.settleDecided(now, a)
	}
	if s.maxFinished > 0 {
		s.trimFinished()
	}
}

// settleDecided is settle's work, through a list rather than recursion so that deep graphs do not
// grow the stack.
func (s *Store) settleDecided(now time.Time, a *announcer) {
	for len(s.decided) > 0 {
		n := len(s.decided) - 1
		j := s.decided[n]
		s.decided[n] = nil
		s.decided = s.decided[:n]
		for _, c := range j.node.children {
			if c.State != store.StatePending || s.jobs[c.ID] != c {
				continue
			}
			switch decide(c) {
			case outcomeRelease:
				s.release(c, now, a)
			case outcomeCancel:
				s.unplace(c)
				c.State = store.StateCancelled
				c.CompletedAt = now
				s.place(c) // queues c on s.decided when it has children
			}
		}
	}
}

// release makes pending job c available now with its parents' results; s.mu must be held.
func (s *Store) release(c *job, now time.Time, a *announcer) {
	s.unplace(c)
	c.State = store.StateAvailable
	c.ScheduledAt = now
	c.ParentResults = parentResults(c.node.parents)
	s.place(c)
	a.add(c)
}

// parentResults is the JSON array of the parents' results, null for a parent without one.
func parentResults(parents []*job) json.RawMessage {
	n := 2
	for _, p := range parents {
		n += max(len(p.Result), len("null")) + 1
	}
	buf := append(make([]byte, 0, n), '[')
	for i, p := range parents {
		if i > 0 {
			buf = append(buf, ',')
		}
		if len(p.Result) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, p.Result...)
		}
	}
	return append(buf, ']')
}
