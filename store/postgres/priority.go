package postgres

import (
	"context"
	"fmt"
)

// CountAvailableByPriority returns how many available jobs of queue wait at each priority.
func (s *Store) CountAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error) {
	rows, err := s.pool.Query(ctx, s.q.availableByPriority, queue)
	if err != nil {
		return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, err)
	}
	defer rows.Close()
	out := make(map[int]int64)
	for rows.Next() {
		var p int32
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, err)
		}
		out[int(p)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count available jobs of queue %q by priority: %w", queue, err)
	}
	return out, nil
}
