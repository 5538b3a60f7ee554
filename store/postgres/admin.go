package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

// defaultListLimit is the page size of ListJobs when none is given.
const defaultListLimit = 100

// Cursor bounds for a listing without one: every UUID sorts after minUUID and before maxUUID.
var (
	minUUID = pgtype.UUID{Valid: true}
	maxUUID = pgtype.UUID{Bytes: [16]byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	}, Valid: true}
)

// GetJob returns the job with id, or an error matching store.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*store.Job, error) {
	u, ok := parseUUID(id)
	if !ok {
		return nil, notFound(id)
	}
	var r jobRow
	if err := s.pool.QueryRow(ctx, s.q.getJob, u).Scan(r.dest()...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, notFound(id)
		}
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	return r.job()
}

// ListJobs returns one page of jobs in id order (descending when asked) after the cursor p.After,
// filtered by state, queue and kind when those lists are not empty, by tags (jobs having every one),
// by workflow when p.WorkflowID is set, by tenant when p.Tenant is (one range read of
// jobs_tenant_state_idx per state), and the cursor of the next page ("" when this page is the last).
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	sql, args, err := s.listQuery(p, limit)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = jobs[limit-1].ID
	}
	return jobs, next, nil
}

// listQuery returns the statement and arguments of ListJobs for p, reading up to limit+1 jobs.
func (s *Store) listQuery(p store.ListParams, limit int) (string, []any, error) {
	// The page starts after start (before it, when descending) and stops at end.
	lower, upper := p.IDWindow()
	lo, hi := minUUID, maxUUID
	for _, b := range []struct {
		text string
		dest *pgtype.UUID
	}{{lower, &lo}, {upper, &hi}} {
		if b.text == "" {
			continue
		}
		u, ok := parseUUID(b.text)
		if !ok {
			return "", nil, fmt.Errorf("list jobs: cursor %q is not a job id", p.After)
		}
		*b.dest = u
	}
	sql, start, end := s.q.listJobs, lo, hi
	if p.Descending {
		sql, start, end = s.q.listJobsDesc, hi, lo
	}
	var states []string
	for _, st := range p.States {
		states = append(states, string(st))
	}
	finished := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	args := []any{states, nilIfEmpty(p.Queues), nilIfEmpty(p.Kinds), start, limit + 1, nilIfEmpty(p.Tags),
		end, finished(p.FinishedAfter), finished(p.FinishedBefore)}
	if p.Tenant != "" {
		sql = s.q.listTenantJobs
		if p.Descending {
			sql = s.q.listTenantJobsDesc
		}
		if len(states) == 0 {
			for _, st := range store.AllStates {
				states = append(states, string(st))
			}
		}
		args[0] = slices.Compact(slices.Sorted(slices.Values(states)))
		var wf any
		if p.WorkflowID != "" {
			wf = p.WorkflowID
		}
		args = append(args, wf, p.Tenant)
	} else if p.WorkflowID != "" {
		sql = s.q.listWorkflowJobs
		if p.Descending {
			sql = s.q.listWorkflowJobsDesc
		}
		args = append(args, p.WorkflowID)
	}
	return sql, args, nil
}

// CancelJob cancels a job that is not terminal, in one statement that locks the row. An active job's
// runner is told through the notifier. A terminal job gives a *store.TransitionError.
func (s *Store) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	return s.transition(ctx, s.q.cancelJob, "cancel", id)
}

// RetryJob makes a discarded or cancelled job available again with its attempts reset, keeping its
// error history, and announces its queue. Other states give a *store.TransitionError. A unique job
// whose key another job holds by now gives a *store.UniqueConflictError and stays as it is.
//
// A workflow job waits again for its parents (pending) when their states would keep a pending job
// waiting, to be decided by their outcomes as if it had never left pending; otherwise it runs now
// with their results, even after a failed parent (the operator's call).
func (s *Store) RetryJob(ctx context.Context, id string) (*store.Job, error) {
	u, ok := parseUUID(id)
	if !ok {
		return nil, notFound(id)
	}
	var parents []pgtype.UUID
	if err := s.pool.QueryRow(ctx, s.q.jobParents, u).Scan(&parents); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, notFound(id)
		}
		return nil, fmt.Errorf("retry job %s: %w", id, err)
	}
	if len(parents) == 0 {
		return s.transition(ctx, s.q.retryJob, "retry", id)
	}
	return s.transitionWith(ctx, "retry", id, func(dest []any) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.q.lockParents, parents); err != nil {
				return err
			}
			return tx.QueryRow(ctx, s.q.retryMember, u).Scan(dest...)
		})
	})
}

// ActivateJob moves a pending job to available and announces its queue. Other states give a
// *store.TransitionError; a unique job whose key another job holds gives a
// *store.UniqueConflictError.
func (s *Store) ActivateJob(ctx context.Context, id string) (*store.Job, error) {
	return s.transition(ctx, s.q.activateJob, "activate", id)
}

// DeleteJob removes a job that is not active and returns it as it was. An active job gives a
// *store.TransitionError: cancel it first.
func (s *Store) DeleteJob(ctx context.Context, id string) (*store.Job, error) {
	return s.transition(ctx, s.q.deleteJob, "delete", id)
}

// transition runs one of the single-job statements, which return the job's previous state and the
// changed job (NULL when the state did not allow the operation), or no row for a missing job.
func (s *Store) transition(ctx context.Context, sql, op, id string) (*store.Job, error) {
	u, ok := parseUUID(id)
	if !ok {
		return nil, notFound(id)
	}
	return s.transitionWith(ctx, op, id, func(dest []any) error {
		return s.pool.QueryRow(ctx, sql, u).Scan(dest...)
	})
}

// transitionWith is transition with the statement run by run, which scans its row into dest.
func (s *Store) transitionWith(ctx context.Context, op, id string, run func(dest []any) error) (*store.Job, error) {
	u, _ := parseUUID(id)
	var (
		prev string
		r    jobRow
	)
	dest := append([]any{&prev}, r.dest()...)
	for attempt := 1; ; attempt++ {
		err := run(dest)
		if err == nil {
			break
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, notFound(id)
		}
		retry, err := s.uniqueConflict(ctx, u, err)
		if !retry || attempt == maxUniqueAttempts {
			return nil, fmt.Errorf("%s job %s: %w", op, id, err)
		}
	}
	if !r.id.Valid {
		te := &store.TransitionError{JobID: id, Operation: op, From: store.State(prev)}
		if op == "delete" && te.From != store.StateActive {
			te.Reason = store.ReasonAwaitedParent // the statement refuses nothing else
		}
		return nil, te
	}
	return r.job()
}

// ListQueues returns every queue that has jobs or is paused, by name, with its job counts per state.
// It counts the whole jobs table, so it is meant for dashboards and operators, not hot paths.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	rows, err := s.pool.Query(ctx, s.q.listQueues)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	var out []store.QueueInfo
	for rows.Next() {
		var (
			q      store.QueueInfo
			counts [8]int64
		)
		if err := rows.Scan(&q.Name, &q.Paused, &counts[0], &counts[1], &counts[2], &counts[3],
			&counts[4], &counts[5], &counts[6], &counts[7]); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		q.Counts = make(map[store.State]int64, len(store.AllStates))
		for i, st := range store.AllStates { // the statement counts in AllStates order
			q.Counts[st] = counts[i]
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}

// PauseQueue stops claims from queue in every client until ResumeQueue, and tells the producers.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	return s.setPaused(ctx, queue, true)
}

// ResumeQueue lets claims from queue start again and wakes its producers.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	return s.setPaused(ctx, queue, false)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool) error {
	kind, op := "r", "resume"
	if paused {
		kind, op = "p", "pause"
	}
	b := &pgx.Batch{}
	b.Queue(s.q.setPaused, queue, paused)
	b.Queue(s.q.notify, queuePayload(kind, queue))
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s queue %q: %w", op, queue, err)
	}
	return nil
}

// Elect makes leaderID the leader of name for ttl when there is no live leader or it already leads
// (renewing its term), in one statement, and reports whether leaderID leads now.
func (s *Store) Elect(ctx context.Context, name, leaderID string, ttl time.Duration) (bool, error) {
	var got string
	err := s.pool.QueryRow(ctx, s.q.elect, name, leaderID, ttl.Microseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("elect leader of %q: %w", name, err)
	}
	return got == leaderID, nil
}

// Resign gives up leaderID's leadership of name, if it holds it, so another can be elected at once.
func (s *Store) Resign(ctx context.Context, name, leaderID string) error {
	if _, err := s.pool.Exec(ctx, s.q.resign, name, leaderID); err != nil {
		return fmt.Errorf("resign leadership of %q: %w", name, err)
	}
	return nil
}

func notFound(id string) error {
	return fmt.Errorf("job %s: %w", id, store.ErrNotFound)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// scanOne scans the one row a statement returns with scan; no row is an error matching
// store.ErrNotFound. what names the row in errors ("rate limit \"k\"").
func scanOne[T any](row pgx.Row, scan func(pgx.Row) (T, error), what string) (T, error) {
	v, err := scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}
