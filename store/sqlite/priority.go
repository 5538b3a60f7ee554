package sqlite

import (
	"context"
	"fmt"
)

// CountAvailableByPriority returns how many available jobs of queue wait at each priority.
func (s *Store) CountAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error) {
	rows, err := s.r.QueryContext(ctx, availableByPrioritySQL, queue)
	if err != nil {
		return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, s.schemaHint(err))
	}
	defer rows.Close()
	out := make(map[int]int64)
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, err)
		}
		out[p] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, err)
	}
	return out, nil
}
