package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.DiscardedPruner   = (*Store)(nil)
	_ store.DiscardedArchiver = (*Store)(nil)
)

// sqlPruneSelect names, as the CTE old, up to $3 discarded jobs: those finished before $1 (NULL:
// none by age) and those beyond the newest $2, oldest first, of the queues $4 (NULL: every queue)
// but $5, less the workflow jobs a pending child still waits for (passed over before the limit,
// so that a batch's failed jobs waiting for their callback never use it up). Both candidate lists are read
// from jobs_finalized_idx (state, completed_at): the count bound finds the $2-th newest entry of
// the index, no table scan (with queues named, the entries of other queues are read past), and
// takes the oldest entries before it in (completed_at, id) order: the completer finishes a batch at
// one timestamp, so ties are common. The
// statement using it closes old's SELECT: with FOR UPDATE to delete, without to read.
const sqlPruneSelect = `WITH cand AS (
	(SELECT id, completed_at FROM {schema}.jobs t
		WHERE state = 'discarded' AND completed_at < $1
			AND ($4::text[] IS NULL OR queue = ANY($4)) AND queue <> ALL($5::text[]) AND ` + sqlNotAwaitedParent + `
		ORDER BY completed_at, id LIMIT $3)
	UNION
	(SELECT id, completed_at FROM {schema}.jobs t
		WHERE state = 'discarded' AND ($4::text[] IS NULL OR queue = ANY($4)) AND queue <> ALL($5::text[])
			AND ` + sqlNotAwaitedParent + `
			AND (completed_at, id) < (SELECT completed_at, id FROM {schema}.jobs
				WHERE state = 'discarded' AND ($4::text[] IS NULL OR queue = ANY($4)) AND queue <> ALL($5::text[])
				ORDER BY completed_at DESC, id DESC OFFSET $2::bigint - 1 LIMIT 1)
		ORDER BY completed_at, id LIMIT $3)
), old AS (
	SELECT t.id, t.workflow_id, t.queue FROM {schema}.jobs t
	WHERE t.id IN (SELECT id FROM cand ORDER BY completed_at, id LIMIT $3) AND t.state = 'discarded'
		AND ` + sqlNotAwaitedParent

// sqlNotAwaitedParent keeps (as t) a workflow job that a pending child still waits for.
const sqlNotAwaitedParent = `(t.workflow_id IS NULL OR NOT EXISTS (SELECT 1 FROM {schema}.jobs c
			WHERE c.workflow_id = t.workflow_id AND c.state = 'pending' AND t.id = ANY(c.parent_ids)))`

// sqlPruneDelete deletes the jobs of the CTE old, with the workflows it leaves empty, and counts
// the jobs deleted per queue.
const sqlPruneDelete = `
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM {schema}.jobs WHERE id = ANY(ARRAY(SELECT id FROM old)) RETURNING id, workflow_id, queue
), emptied AS (
	DELETE FROM {schema}.workflows w
	WHERE w.id IN (SELECT workflow_id FROM gone WHERE workflow_id IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j
			WHERE j.workflow_id = w.id AND j.id <> ALL(ARRAY(SELECT id FROM gone)))
)
SELECT queue, count(*) FROM gone GROUP BY queue`

// sqlPruneDiscarded deletes the jobs sqlPruneSelect names.
const sqlPruneDiscarded = sqlPruneSelect + sqlPruneDelete

// sqlPruneCandidates reads the jobs sqlPruneSelect names, oldest first.
const sqlPruneCandidates = sqlPruneSelect + `
)
SELECT ` + jobCols + ` FROM {schema}.jobs WHERE id IN (SELECT id FROM old) ORDER BY completed_at, id`

// sqlDeleteDiscarded deletes the jobs $1 whose row is still discarded with the completed_at $2
// holds for it (the version the caller archived).
const sqlDeleteDiscarded = `WITH old AS (
	SELECT t.id, t.workflow_id, t.queue FROM {schema}.jobs t
		JOIN unnest($1::uuid[], $2::timestamptz[]) AS v(id, completed_at)
			ON t.id = v.id AND t.completed_at = v.completed_at
	WHERE t.state = 'discarded' AND ` + sqlNotAwaitedParent + sqlPruneDelete

// PruneDiscarded deletes the oldest discarded jobs of the queues p covers: those finished before
// p.Before, and those beyond the newest p.Keep, at most p.Limit (see store.DiscardedPruner).
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	if p.Before.IsZero() && p.Keep <= 0 {
		return map[string]int{}, nil
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlPruneDiscarded), pruneArgs(p)...)
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	out, err := countPerQueue(rows)
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	return out, nil
}

// pruneArgs gives sqlPruneSelect's parameters for p.
func pruneArgs(p store.PruneParams) []any {
	keep := int64(math.MaxInt64)
	if p.Keep > 0 {
		keep = int64(p.Keep)
	}
	var queues []string // NULL: every queue
	if len(p.Queues) > 0 {
		queues = p.Queues
	}
	skip := p.SkipQueues
	if skip == nil {
		skip = []string{} // <> ALL of an empty array holds; of NULL it would not
	}
	return []any{nullTime(p.Before), keep, limitOrDefault(p.Limit), queues, skip}
}

// countPerQueue reads (queue, count) rows into a map.
func countPerQueue(rows pgx.Rows) (map[string]int, error) {
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var q string
		var n int
		if err := rows.Scan(&q, &n); err != nil {
			return nil, err
		}
		out[q] = n
	}
	return out, rows.Err()
}

// PruneCandidates reads the discarded jobs PruneDiscarded(ctx, p) would delete now, oldest first
// (see store.DiscardedArchiver).
func (s *Store) PruneCandidates(ctx context.Context, p store.PruneParams) ([]*store.Job, error) {
	if p.Before.IsZero() && p.Keep <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlPruneCandidates), pruneArgs(p)...)
	if err != nil {
		return nil, fmt.Errorf("read the discarded jobs to prune: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("read the discarded jobs to prune: %w", err)
	}
	return jobs, nil
}

// DeleteDiscarded deletes the jobs still discarded as read (see store.DiscardedArchiver), in one
// statement.
func (s *Store) DeleteDiscarded(ctx context.Context, jobs []*store.Job) (map[string]int, error) {
	if len(jobs) == 0 {
		return map[string]int{}, nil
	}
	ids := make([]string, len(jobs))
	at := make([]time.Time, len(jobs))
	for i, j := range jobs {
		ids[i], at[i] = j.ID, j.CompletedAt
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlDeleteDiscarded), ids, at)
	if err != nil {
		return nil, fmt.Errorf("delete pruned discarded jobs: %w", err)
	}
	out, err := countPerQueue(rows)
	if err != nil {
		return nil, fmt.Errorf("delete pruned discarded jobs: %w", err)
	}
	return out, nil
}
