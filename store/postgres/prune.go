package postgres

import (
	"context"
	"fmt"
	"math"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.DiscardedPruner = (*Store)(nil)

// sqlPruneDiscarded deletes up to $3 discarded jobs: those finished before $1 (NULL: none by age)
// and those beyond the newest $2, oldest first, of the queues $4 (NULL: every queue) but $5, with
// the workflows it leaves empty, and counts the jobs deleted per queue. Both candidate lists are
// read from jobs_finalized_idx (state, completed_at): the count bound skips the newest $2 entries of
// the index, no table scan (with queues named, the entries of other queues are read past).
const sqlPruneDiscarded = `WITH cand AS (
	(SELECT id, completed_at FROM {schema}.jobs
		WHERE state = 'discarded' AND completed_at < $1
			AND ($4::text[] IS NULL OR queue = ANY($4)) AND queue <> ALL($5::text[])
		ORDER BY completed_at LIMIT $3)
	UNION
	(SELECT id, completed_at FROM {schema}.jobs
		WHERE state = 'discarded' AND ($4::text[] IS NULL OR queue = ANY($4)) AND queue <> ALL($5::text[])
		ORDER BY completed_at DESC OFFSET $2 LIMIT $3)
), old AS (
	SELECT t.id, t.workflow_id, t.queue FROM {schema}.jobs t
	WHERE t.id IN (SELECT id FROM cand ORDER BY completed_at LIMIT $3) AND t.state = 'discarded'
		AND (t.workflow_id IS NULL OR NOT EXISTS (SELECT 1 FROM {schema}.jobs c
			WHERE c.workflow_id = t.workflow_id AND c.state = 'pending' AND t.id = ANY(c.parent_ids)))
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

// PruneDiscarded deletes the oldest discarded jobs of the queues p covers: those finished before
// p.Before, and those beyond the newest p.Keep, at most p.Limit (see store.DiscardedPruner).
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	keep := int64(math.MaxInt64)
	if p.Keep > 0 {
		keep = int64(p.Keep)
	}
	if p.Before.IsZero() && p.Keep <= 0 {
		return map[string]int{}, nil
	}
	var queues []string // NULL: every queue
	if len(p.Queues) > 0 {
		queues = p.Queues
	}
	skip := p.SkipQueues
	if skip == nil {
		skip = []string{} // <> ALL of an empty array holds; of NULL it would not
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlPruneDiscarded), nullTime(p.Before), keep, limitOrDefault(p.Limit),
		queues, skip)
	if err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var q string
		var n int
		if err := rows.Scan(&q, &n); err != nil {
			return nil, fmt.Errorf("prune discarded jobs: %w", err)
		}
		out[q] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("prune discarded jobs: %w", err)
	}
	return out, nil
}
