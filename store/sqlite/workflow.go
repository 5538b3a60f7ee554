package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.Workflows = (*Store)(nil)

// Workflows live in pronto_workflows (one row each) and in the jobs table (workflow_id, parent_ids,
// run_on, parent_results), with the graph's edges in pronto_job_deps so that a job reaching a terminal
// state finds its children by primary key. Every path that moves a workflow job to a terminal state
// calls settleChildren inside its own transaction; the paths learn whether they moved one from the
// workflow_id their UPDATE returns, so jobs outside workflows pay one NULL test.

// settleQueries are the statements settleChildren runs, prepared before any transaction that may
// call it.
var settleQueries = []string{pendingChildrenSQL, parentStatesSQL, releaseChildrenSQL, cancelChildrenSQL}

// queryer is what reading a workflow needs: a read transaction or a txRunner.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// InsertWorkflow stores the workflow and its jobs in one write transaction: jobs with parents are
// inserted pending, the others in the state their params give. The queues of the jobs claimable now
// are announced once it commits. An invalid graph wraps store.ErrInvalidParams and an existing
// workflow or job id store.ErrDuplicate; either way nothing is stored.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	if err := store.ValidateWorkflow(p); err != nil {
		return nil, nil, fmt.Errorf("insert workflow: %w", err)
	}
	if len(p.Meta) > 0 && !json.Valid(p.Meta) {
		return nil, nil, fmt.Errorf("insert workflow %s: %w: meta is not valid JSON", p.ID, store.ErrInvalidParams)
	}
	nowUS, now := s.nowMicro()
	rows, err := prepareInsert(p.Jobs, nowUS, now, false)
	if err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	var edges [][2]string
	for _, j := range p.Jobs {
		for _, parent := range j.ParentIDs {
			edges = append(edges, [2]string{parent, j.ID})
		}
	}
	edgesJSON, err := json.Marshal(edges)
	if err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}

	queries := append([]string{insertWorkflowSQL, insertDepsSQL}, rateLimitQueries...)
	for _, n := range insertPieces(len(rows)) {
		queries = append(queries, insertJobsSQL(n, true))
	}
	r, err := s.begin(ctx, queries...)
	if err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := r.ExecContext(ctx, insertWorkflowSQL, p.ID, p.Name, p.Type, nullJSON(p.Meta), nowUS); err != nil {
		if sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
			return nil, nil, fmt.Errorf("insert workflow %s: %w: a workflow with this id exists", p.ID, store.ErrDuplicate)
		}
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	if err := upsertRateLimits(ctx, r, p.Jobs, nowUS); err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	if err := insertRowsTx(ctx, r, rows, true); err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	if len(edges) > 0 {
		if _, err := r.ExecContext(ctx, insertDepsSQL, string(edgesJSON)); err != nil {
			return nil, nil, fmt.Errorf("insert workflow %s: edges: %w", p.ID, err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: commit: %w", p.ID, err)
	}

	jobs := make([]*store.Job, len(rows))
	w := &store.Workflow{ID: p.ID, Name: p.Name, Type: p.Type, Meta: p.Meta, CreatedAt: now,
		Counts: zeroCounts()}
	if len(w.Meta) == 0 || string(w.Meta) == "null" {
		w.Meta = nil
	}
	for i := range rows {
		jobs[i] = rows[i].job
		if jobs[i].RunOn == "" {
			w.Total++
			w.Counts[jobs[i].State]++
		} else {
			w.Callbacks.Total++
		}
	}
	w.State = store.DeriveWorkflowState(false, w.Total, w.Counts, w.Callbacks)
	s.publish(insertNotifications(jobs, nowUS))
	return w, jobs, nil
}

// GetWorkflow returns the workflow with id and its members' progress, read in one snapshot, or an
// error wrapping store.ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("get workflow %s: %w", id, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	w, err := loadWorkflow(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("get workflow %s: %w", id, s.schemaHint(err))
	}
	return w, nil
}

// CancelWorkflow cancels, in one write transaction, every job of the workflow that is not terminal
// (members and callbacks) and marks the workflow cancelled, then tells the runners of the jobs that
// were active (NotifyCancel). It returns the workflow and the jobs it cancelled as they were before.
// Cancelling twice is not an error; a completed or failed workflow (members and callbacks terminal)
// is left so, with an error matching store.ErrWorkflowFinished. Every job of the workflow is
// terminal afterwards, and a job's children are in its own workflow, so no pending child is left to
// decide.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, []*store.Job, error) {
	nowUS, _ := s.nowMicro()
	r, err := s.begin(ctx, markWorkflowCancelledSQL, workflowUnfinishedSQL, cancelWorkflowJobsSQL, getWorkflowSQL,
		workflowCountsSQL)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	// The write transaction holds the database: no step can finish between this read and the cancel.
	before, err := loadWorkflow(ctx, r, id)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	if err := store.CancelRefusal(id, before.State); err != nil {
		return nil, nil, fmt.Errorf("cancel workflow: %w", err)
	}
	marked, err := r.QueryContext(ctx, markWorkflowCancelledSQL, id, nowUS)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	found := marked.Next()
	if err := closeRows(marked); err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	if !found {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, store.ErrNotFound)
	}
	var out outbox
	unfinished, err := r.QueryContext(ctx, workflowUnfinishedSQL, id)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	// The write transaction holds the database: these are exactly the jobs the update cancels.
	cancelled, err := scanJobs(unfinished, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	for _, j := range cancelled {
		if j.State == store.StateActive {
			out.cancel(j.Queue, j.ID, j.ClaimToken)
		}
	}
	rows, err := r.QueryContext(ctx, cancelWorkflowJobsSQL, id, nowUS)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	for rows.Next() {
		var jobID, queue string
		var rateKey sql.NullString
		if err := rows.Scan(&jobID, &queue, &rateKey); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
		}
		if rateKey.Valid { // a limited slot may have been freed
			out.wake(queue, time.Time{})
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	w, err := loadWorkflow(ctx, r, id)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	if err := r.tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("cancel workflow %s: commit: %w", id, err)
	}
	s.publishOutbox(&out)
	return w, cancelled, nil
}

// zeroCounts returns workflow counts with every state at zero.
func zeroCounts() map[store.State]int {
	m := make(map[store.State]int, len(store.AllStates))
	for _, st := range store.AllStates {
		m[st] = 0
	}
	return m
}

// countCallbacks adds n callbacks in state st to c.
func countCallbacks(c *store.CallbackCounts, st store.State, n int) {
	c.Total += n
	switch st {
	case store.StateCompleted:
		c.Completed += n
	case store.StateCancelled:
		c.Cancelled += n
	case store.StateDiscarded:
		c.Discarded += n
	}
}

// loadWorkflow reads workflow id and derives its state from its members' and callbacks' counts.
func loadWorkflow(ctx context.Context, q queryer, id string) (*store.Workflow, error) {
	rows, err := q.QueryContext(ctx, getWorkflowSQL, id)
	if err != nil {
		return nil, err
	}
	w := &store.Workflow{Counts: zeroCounts()}
	found := false
	for rows.Next() {
		var meta []byte
		var created int64
		var cancelled sql.NullInt64
		if err := rows.Scan(&w.ID, &w.Name, &w.Type, &meta, &created, &cancelled); err != nil {
			rows.Close()
			return nil, err
		}
		if len(meta) > 0 {
			w.Meta = meta
		}
		w.CreatedAt = microTime(created)
		w.CancelledAt = nullMicroTime(cancelled)
		found = true
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	if !found {
		return nil, store.ErrNotFound
	}

	rows, err = q.QueryContext(ctx, workflowCountsSQL, id)
	if err != nil {
		return nil, err
	}
	var lastCompleted int64
	for rows.Next() {
		var state string
		var isCallback bool
		var n int
		var completed sql.NullInt64
		if err := rows.Scan(&state, &isCallback, &n, &completed); err != nil {
			rows.Close()
			return nil, err
		}
		if isCallback {
			countCallbacks(&w.Callbacks, store.State(state), n)
		} else {
			w.Counts[store.State(state)] = n
			w.Total += n
		}
		if completed.Valid && completed.Int64 > lastCompleted {
			lastCompleted = completed.Int64
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, err
	}
	w.State = store.DeriveWorkflowState(!w.CancelledAt.IsZero(), w.Total, w.Counts, w.Callbacks)
	switch {
	case w.State == store.WorkflowCancelled:
		w.FinishedAt = w.CancelledAt
	case w.State != store.WorkflowRunning && lastCompleted != 0:
		w.FinishedAt = microTime(lastCompleted)
	}
	return w, nil
}

// child is a pending workflow job whose parents' outcome may now be known.
type child struct {
	id, queue string
	runOn     store.RunOn
	parents   []string
}

// parent is what deciding a child needs of one of its parents.
type parent struct {
	state  store.State
	result []byte
}

// decision is what happens to a pending child.
type decision int

const (
	keepWaiting decision = iota
	release
	cancelChild
)

// decide applies the contract's rules to a child given its parents (a parent missing from parents,
// deleted meanwhile, counts as not terminal: the child keeps waiting for it).
func decide(c child, parents map[string]parent) decision {
	allTerminal, allCompleted, anyFailed := true, true, false
	for _, id := range c.parents {
		p, ok := parents[id]
		if !ok || !p.state.Terminal() {
			allTerminal, allCompleted = false, false
			continue
		}
		if p.state != store.StateCompleted {
			allCompleted, anyFailed = false, true
		}
	}
	switch c.runOn {
	case store.RunOnFailure:
		switch {
		case !allTerminal:
			return keepWaiting
		case anyFailed:
			return release
		default:
			return cancelChild
		}
	case store.RunOnComplete:
		if allTerminal {
			return release
		}
		return keepWaiting
	default: // members and RunOnSuccess callbacks
		switch {
		case anyFailed:
			return cancelChild
		case allCompleted:
			return release
		default:
			return keepWaiting
		}
	}
}

// settleChildren decides the pending children of the workflow jobs in finished, which reached a
// terminal state in r's transaction: it releases those whose parents' outcome lets them run (with
// their parents' results, announcing their queues through out) and cancels those that can never run,
// whose own children it then decides in turn. The cascade is a loop over generations, not a
// recursion, so a chain of any length is settled in one call.
func settleChildren(ctx context.Context, r txRunner, finished []string, nowUS int64, out *outbox) error {
	frontier := finished
	for len(frontier) > 0 {
		children, err := pendingChildren(ctx, r, frontier)
		if err != nil {
			return err
		}
		if len(children) == 0 {
			return nil
		}
		parents, err := parentsOf(ctx, r, children)
		if err != nil {
			return err
		}
		type released struct {
			ID      string          `json:"id"`
			Results json.RawMessage `json:"results"`
		}
		var toRelease []released
		var toCancel []string
		for _, c := range children {
			switch decide(c, parents) {
			case release:
				toRelease = append(toRelease, released{ID: c.id, Results: parentResults(c, parents)})
				out.wake(c.queue, time.Time{})
			case cancelChild:
				toCancel = append(toCancel, c.id)
			}
		}
		if len(toRelease) > 0 {
			b, err := json.Marshal(toRelease)
			if err != nil {
				return err
			}
			if _, err := r.ExecContext(ctx, releaseChildrenSQL, nowUS, string(b)); err != nil {
				return fmt.Errorf("release workflow children: %w", err)
			}
		}
		frontier = nil
		if len(toCancel) > 0 {
			b, err := json.Marshal(toCancel)
			if err != nil {
				return err
			}
			rows, err := r.QueryContext(ctx, cancelChildrenSQL, nowUS, string(b))
			if err != nil {
				return fmt.Errorf("cancel workflow children: %w", err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				frontier = append(frontier, id)
			}
			if err := closeRows(rows); err != nil {
				return fmt.Errorf("cancel workflow children: %w", err)
			}
		}
	}
	return nil
}

// pendingChildren returns the pending children of the jobs in ids.
func pendingChildren(ctx context.Context, r txRunner, ids []string) ([]child, error) {
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := r.QueryContext(ctx, pendingChildrenSQL, string(b))
	if err != nil {
		return nil, fmt.Errorf("find workflow children: %w", err)
	}
	var out []child
	for rows.Next() {
		var c child
		var runOn sql.NullString
		var parents []byte
		if err := rows.Scan(&c.id, &c.queue, &runOn, &parents); err != nil {
			rows.Close()
			return nil, err
		}
		c.runOn = store.RunOn(runOn.String)
		if len(parents) > 0 {
			if err := json.Unmarshal(parents, &c.parents); err != nil {
				rows.Close()
				return nil, fmt.Errorf("job %s: decode parent ids: %w", c.id, err)
			}
		}
		out = append(out, c)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("find workflow children: %w", err)
	}
	return out, nil
}

// parentsOf reads the state and result of every parent of children.
func parentsOf(ctx context.Context, r txRunner, children []child) (map[string]parent, error) {
	var ids []string
	seen := map[string]bool{}
	for _, c := range children {
		for _, id := range c.parents {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := r.QueryContext(ctx, parentStatesSQL, string(b))
	if err != nil {
		return nil, fmt.Errorf("read workflow parents: %w", err)
	}
	out := make(map[string]parent, len(ids))
	for rows.Next() {
		var id, state string
		var result []byte
		if err := rows.Scan(&id, &state, &result); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = parent{state: store.State(state), result: result}
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("read workflow parents: %w", err)
	}
	return out, nil
}

// parentResults is the JSON array of c's parents' results, in its ParentIDs order, null for a parent
// without one.
func parentResults(c child, parents map[string]parent) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range c.parents {
		if i > 0 {
			b.WriteByte(',')
		}
		if r := parents[id].result; len(r) > 0 {
			b.Write(r)
		} else {
			b.WriteString("null")
		}
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

// closeRows closes rows and returns the error that ended their iteration, if any.
func closeRows(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}
