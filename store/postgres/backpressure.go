package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.QueueBounder = (*Store)(nil)

// Queue bounds live in {schema}.queue_bounds (migration 008). The statements are not prepared: the
// client reads bounds and depths at most about once a second, never once per insert.

// SetQueueMaxDepth stores queue's maximum depth; 0 removes the bound.
func (s *Store) SetQueueMaxDepth(ctx context.Context, queue string, maxDepth int64) error {
	var err error
	if maxDepth <= 0 {
		_, err = s.pool.Exec(ctx, s.expand.Replace(`DELETE FROM {schema}.queue_bounds WHERE name = $1`), queue)
	} else {
		_, err = s.pool.Exec(ctx, s.expand.Replace(`INSERT INTO {schema}.queue_bounds (name, max_depth) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET max_depth = excluded.max_depth`), queue, maxDepth)
	}
	if err != nil {
		return fmt.Errorf("set max depth of queue %q: %w", queue, err)
	}
	return nil
}

// QueueMaxDepths returns the maximum depth of every bounded queue.
func (s *Store) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, s.expand.Replace(`SELECT name, max_depth FROM {schema}.queue_bounds`))
	if err != nil {
		return nil, fmt.Errorf("queue bounds: %w", err)
	}
	out := map[string]int64{}
	var name string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil }); err != nil {
		return nil, fmt.Errorf("queue bounds: %w", err)
	}
	return out, nil
}

// QueueDepths counts the non-terminal jobs of each of queues, in one query.
func (s *Store) QueueDepths(ctx context.Context, queues []string) (map[string]int64, error) {
	out := make(map[string]int64, len(queues))
	if len(queues) == 0 {
		return out, nil
	}
	for _, q := range queues {
		out[q] = 0
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(`SELECT queue, count(*) FROM {schema}.jobs
WHERE queue = ANY ($1) AND state IN ('available', 'scheduled', 'retryable', 'pending', 'active')
GROUP BY queue`), queues)
	if err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	var name string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil }); err != nil {
		return nil, fmt.Errorf("queue depths: %w", err)
	}
	return out, nil
}
