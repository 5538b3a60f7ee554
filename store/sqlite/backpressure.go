package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.QueueBounder = (*Store)(nil)

// Queue bounds live in the pronto_queue_bounds table (migration 006).

// SetQueueMaxDepth stores queue's maximum depth; 0 removes the bound.
func (s *Store) SetQueueMaxDepth(ctx context.Context, queue string, maxDepth int64) error {
	var err error
	if maxDepth <= 0 {
		_, err = s.w.ExecContext(ctx, `DELETE FROM pronto_queue_bounds WHERE name = ?`, queue)
	} else {
		_, err = s.w.ExecContext(ctx, `INSERT INTO pronto_queue_bounds (name, max_depth) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET max_depth = excluded.max_depth`, queue, maxDepth)
	}
	if err != nil {
		return fmt.Errorf("set max depth of queue %q: %w", queue, s.schemaHint(err))
	}
	return nil
}

// QueueMaxDepths returns the maximum depth of every bounded queue.
func (s *Store) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, max_depth FROM pronto_queue_bounds`)
	if err != nil {
		return nil, fmt.Errorf("queue bounds: %w", s.schemaHint(err))
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("queue bounds: %w", err)
		}
		out[name] = n
	}
	return out, rows.Err()
}

// QueueDepths counts the non-terminal jobs of each of queues, in one query.
func (s *Store) QueueDepths(ctx context.Context, queues []string) (map[string]int64, error) {
	out := make(map[string]int64, len(queues))
	if len(queues) == 0 {
		return out, nil
	}
	args := make([]any, len(queues))
	for i, q := range queues {
		args[i] = q
		out[q] = 0
	}
	q := `SELECT queue, count(*) FROM pronto_jobs WHERE queue IN (?` + strings.Repeat(",?", len(queues)-1) +
		`) AND state IN ('available', 'scheduled', 'retryable', 'pending', 'active') GROUP BY queue`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", s.schemaHint(err))
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("queue depths: %w", err)
		}
		out[name] = n
	}
	return out, rows.Err()
}
