package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.DiscardedPruner   = (*Store)(nil)
	_ store.DiscardedArchiver = (*Store)(nil)
)

// pruneScanSQL picks up to ?3 discarded jobs from pronto_jobs_discarded_idx: those finished before
// ?1 (NULL: none by age) and the oldest of those before the ?2-th newest in (completed_at, id)
// order (the completer finishes a batch at one timestamp, so ties are common), of the queues ?4 (a
// JSON array; NULL: every queue) but ?5 (a JSON array).
const pruneScanSQL = `SELECT rowid FROM (SELECT rowid FROM pronto_jobs INDEXED BY pronto_jobs_discarded_idx
		WHERE state = 'discarded' AND completed_at < ?1 AND ` + pruneQueuesSQL + ` AND ` + notAwaitedSQL + `
		ORDER BY completed_at, id LIMIT ?3)
	UNION
	SELECT rowid FROM (SELECT rowid FROM pronto_jobs INDEXED BY pronto_jobs_discarded_idx
		WHERE state = 'discarded' AND ` + pruneQueuesSQL + ` AND ` + notAwaitedSQL + `
			AND (completed_at, id) < (SELECT completed_at, id FROM pronto_jobs INDEXED BY pronto_jobs_discarded_idx
				WHERE state = 'discarded' AND ` + pruneQueuesSQL + `
				ORDER BY completed_at DESC, id DESC LIMIT 1 OFFSET ?2 - 1)
		ORDER BY completed_at, id LIMIT ?3)
	LIMIT ?3`

// notAwaitedSQL passes over the workflow jobs a pending child still waits for, before the scan's
// limit, so that a batch's failed jobs waiting for their callback never use it up.
const notAwaitedSQL = `(workflow_id IS NULL OR NOT ` + keptParentSQL + `)`

// pruneQueuesSQL keeps the jobs of the queues a pass covers (see pruneScanSQL).
const pruneQueuesSQL = `(?4 IS NULL OR queue IN (SELECT value FROM json_each(?4)))
		AND queue NOT IN (SELECT value FROM json_each(?5))`

// pruneDeleteSQL deletes the candidates (a JSON array of rowids) that are still discarded and not
// kept as workflow parents, returning their queues and workflows.
const pruneDeleteSQL = `DELETE FROM pronto_jobs
	WHERE rowid IN (SELECT value FROM json_each(?1)) AND state = 'discarded'
	  AND ` + notAwaitedSQL + `
	RETURNING queue, workflow_id`

// pruneCandidatesSQL reads the candidates (a JSON array of rowids) that the delete would take,
// oldest first.
const pruneCandidatesSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE rowid IN (SELECT value FROM json_each(?1)) AND state = 'discarded' AND ` + notAwaitedSQL + `
	ORDER BY completed_at, id`

// deleteDiscardedSQL deletes the jobs ?1 (a JSON array of [id, completed_at] pairs) still
// discarded at that completed_at and not kept as workflow parents.
const deleteDiscardedSQL = `DELETE FROM pronto_jobs
	WHERE (id, completed_at) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))
	  AND state = 'discarded' AND ` + notAwaitedSQL + `
	RETURNING queue, workflow_id`

// PruneDiscarded deletes discarded jobs of the queues p covers finished before p.Before and those
// beyond the newest p.Keep, at most p.Limit (see store.DiscardedPruner). The candidates are read on a read connection from an
// index of discarded jobs, then deleted in one short write transaction that checks them again.
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	candidates, err := s.pruneScan(ctx, p)
	if err != nil || len(candidates) == 0 {
		return map[string]int{}, err
	}
	return s.deleteDiscarded(ctx, pruneDeleteSQL, candidates)
}

// pruneScan returns the rowids of the discarded jobs p's pass would delete (before the workflow
// rule), read on a read connection.
func (s *Store) pruneScan(ctx context.Context, p store.PruneParams) ([]int64, error) {
	if p.Before.IsZero() && p.Keep <= 0 {
		return nil, nil
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	keep := int64(math.MaxInt64)
	if p.Keep > 0 {
		keep = int64(p.Keep)
	}
	var queues any // NULL: every queue
	if len(p.Queues) > 0 {
		b, err := json.Marshal(p.Queues)
		if err != nil {
			return nil, err
		}
		queues = string(b)
	}
	skip, err := json.Marshal(append([]string{}, p.SkipQueues...))
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, pruneScanSQL, micro(p.Before), keep, limit, queues, string(skip))
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", s.schemaHint(err))
	}
	var candidates []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("prune discarded jobs: %w", err)
		}
		candidates = append(candidates, id)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	return candidates, nil
}

// PruneCandidates reads the discarded jobs PruneDiscarded(ctx, p) would delete now, oldest first
// (see store.DiscardedArchiver).
func (s *Store) PruneCandidates(ctx context.Context, p store.PruneParams) ([]*store.Job, error) {
	candidates, err := s.pruneScan(ctx, p)
	if err != nil || len(candidates) == 0 {
		return nil, err
	}
	b, err := json.Marshal(candidates)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, pruneCandidatesSQL, string(b))
	if err != nil {
		return nil, fmt.Errorf("read the discarded jobs to prune: %w", err)
	}
	jobs, err := scanJobs(rows, len(candidates))
	if err != nil {
		return nil, fmt.Errorf("read the discarded jobs to prune: %w", err)
	}
	return jobs, nil
}

// DeleteDiscarded deletes the jobs still discarded as read (see store.DiscardedArchiver), in one
// write transaction.
func (s *Store) DeleteDiscarded(ctx context.Context, jobs []*store.Job) (map[string]int, error) {
	if len(jobs) == 0 {
		return map[string]int{}, nil
	}
	pairs := make([][2]any, len(jobs))
	for i, j := range jobs {
		pairs[i] = [2]any{j.ID, micro(j.CompletedAt)}
	}
	return s.deleteDiscarded(ctx, deleteDiscardedSQL, pairs)
}

// deleteDiscarded runs query (pruneDeleteSQL or deleteDiscardedSQL) with which, as JSON, in one
// write transaction with the workflows it leaves empty, and counts the jobs deleted per queue.
func (s *Store) deleteDiscarded(ctx context.Context, query string, which any) (map[string]int, error) {
	ids, err := json.Marshal(which)
	if err != nil {
		return nil, err
	}
	r, err := s.begin(ctx, query, cleanupWorkflowsSQL)
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	drows, err := r.QueryContext(ctx, query, string(ids))
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	out := map[string]int{}
	var inWorkflows []string
	for drows.Next() {
		var queue string
		var workflowID sql.NullString
		if err := drows.Scan(&queue, &workflowID); err != nil {
			drows.Close()
			return nil, fmt.Errorf("prune discarded jobs: %w", err)
		}
		out[queue]++
		if workflowID.Valid && !slices.Contains(inWorkflows, workflowID.String) {
			inWorkflows = append(inWorkflows, workflowID.String)
		}
	}
	if err := closeRows(drows); err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	if len(inWorkflows) > 0 {
		b, err := json.Marshal(inWorkflows)
		if err != nil {
			return nil, err
		}
		if _, err := r.ExecContext(ctx, cleanupWorkflowsSQL, string(b)); err != nil {
			return nil, fmt.Errorf("prune discarded jobs: workflows: %w", err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("prune discarded jobs: commit: %w", err)
	}
	return out, nil
}
