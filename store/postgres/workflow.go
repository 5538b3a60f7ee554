package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.Workflows = (*Store)(nil)

// InsertWorkflow stores the workflow and all its jobs in one transaction: the workflow row, the
// rate limits its jobs carry, then the jobs (pipelined, or with COPY for a large workflow). Jobs
// with parents wait pending; the database releases or cancels them as their parents finish (see
// workflow_advance in the migrations). The queues of the jobs claimable now are announced on
// commit. An invalid graph wraps store.ErrInvalidParams, an existing workflow or job id
// store.ErrDuplicate; either way nothing is stored.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	if err := store.ValidateWorkflow(p); err != nil {
		return nil, nil, fmt.Errorf("insert workflow: %w", err)
	}
	rows, _, err := prepareInsert(p.Jobs, true)
	if err != nil {
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	var (
		createdAt time.Time
		jobs      []*store.Job
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.q.insertWorkflow, p.ID, p.Name, p.Type, nullJSON(p.Meta)).Scan(&createdAt); err != nil {
			return err
		}
		limits := &pgx.Batch{}
		if queueLimits(limits, s.q.upsertRateLimit, rows); limits.Len() > 0 {
			if err := tx.SendBatch(ctx, limits).Close(); err != nil {
				return err
			}
		}
		notes := insertNotifications(rows, time.Now())
		if len(rows) <= pipelineMax {
			jobs, err = s.insertRows(ctx, tx, rows, notes)
			return err
		}
		if jobs, err = s.copyInTx(ctx, tx, rows); err != nil {
			return err
		}
		return s.notifyAll(ctx, tx, notes)
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation {
			return nil, nil, fmt.Errorf("insert workflow %s: %w: %s", p.ID, store.ErrDuplicate, pgErr.Detail)
		}
		return nil, nil, fmt.Errorf("insert workflow %s: %w", p.ID, err)
	}
	w := &store.Workflow{ID: p.ID, Name: p.Name, Type: p.Type, Meta: nullJSON(p.Meta), CreatedAt: createdAt,
		Counts: make(map[store.State]int, len(store.AllStates))}
	for _, st := range store.AllStates {
		w.Counts[st] = 0
	}
	for _, j := range jobs {
		if j.RunOn == "" {
			w.Total++
			w.Counts[j.State]++
		} else {
			w.Callbacks.Total++
		}
	}
	w.State = store.DeriveWorkflowState(false, w.Total, w.Counts, w.Callbacks)
	return w, jobs, nil
}

// GetWorkflow returns the workflow with id, its state derived from its jobs' current states, or
// an error matching store.ErrNotFound.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	w, err := scanWorkflow(s.pool.QueryRow(ctx, s.q.getWorkflow, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("workflow %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	return w, nil
}

// CancelWorkflow cancels every job of the workflow that is not terminal, members and callbacks
// alike (active ones' runners are told), marks the workflow cancelled, and returns it as it is
// then with the jobs it cancelled as they were before, in one transaction. A second call changes
// nothing and keeps the first cancellation's time. A completed or failed workflow (members and
// callbacks terminal) is left so, with an error matching store.ErrWorkflowFinished. A missing workflow gives an error matching
// store.ErrNotFound.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, []*store.Job, error) {
	var (
		w         *store.Workflow
		cancelled []*store.Job
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.q.cancelWorkflow, id)
		if err != nil {
			return err
		}
		if cancelled, err = scanJobs(rows); err != nil {
			return err
		}
		// The statement locks the jobs it cancels, so a job it cancelled had not finished: a member
		// or a callback still to run or finish, so the workflow was running. Cancelling nothing, it
		// was finished or cancelled already; rolled back, it is left as it was.
		if len(cancelled) == 0 {
			return errCancelNothing
		}
		w, err = scanWorkflow(tx.QueryRow(ctx, s.q.getWorkflow, id))
		return err
	})
	switch {
	case errors.Is(err, errCancelNothing):
		cancelled = nil
		if w, err = s.GetWorkflow(ctx, id); err != nil {
			return nil, nil, fmt.Errorf("cancel %w", err)
		}
		if err := store.CancelRefusal(id, w.State); err != nil {
			return nil, nil, fmt.Errorf("cancel workflow: %w", err)
		}
	case err != nil:
		return nil, nil, fmt.Errorf("cancel workflow %s: %w", id, err)
	}
	return w, cancelled, nil
}

// errCancelNothing rolls back a CancelWorkflow that found no job to cancel.
var errCancelNothing = errors.New("no job to cancel")

// scanWorkflow reads one row of workflowCols and derives the workflow's state.
func scanWorkflow(row pgx.Row) (*store.Workflow, error) {
	var (
		w                     store.Workflow
		cancelledAt, finished pgtype.Timestamptz
		total                 int64
		counts                [8]int64
		cb                    [4]int64
	)
	err := row.Scan(&w.ID, &w.Name, &w.Type, &w.Meta, &w.CreatedAt, &cancelledAt, &total,
		&counts[0], &counts[1], &counts[2], &counts[3], &counts[4], &counts[5], &counts[6], &counts[7],
		&finished, &cb[0], &cb[1], &cb[2], &cb[3])
	if err != nil {
		return nil, err
	}
	w.Callbacks = store.CallbackCounts{Total: int(cb[0]), Completed: int(cb[1]), Cancelled: int(cb[2]), Discarded: int(cb[3])}
	w.Total = int(total)
	w.Counts = make(map[store.State]int, len(store.AllStates))
	for i, st := range store.AllStates { // the statement counts in AllStates order
		w.Counts[st] = int(counts[i])
	}
	w.CancelledAt = timeOf(cancelledAt)
	w.State = store.DeriveWorkflowState(cancelledAt.Valid, w.Total, w.Counts, w.Callbacks)
	switch w.State {
	case store.WorkflowRunning:
	case store.WorkflowCancelled:
		w.FinishedAt = w.CancelledAt
	default:
		w.FinishedAt = timeOf(finished)
	}
	return &w, nil
}
