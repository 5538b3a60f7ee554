package memory

import (
	"context"

	"github.com/pronto-jobs/pronto/store"
)

// CountAvailableByPriority returns how many available jobs of queue wait at each priority. The
// store files jobs by queue only in its claim structures, whose entries go stale lazily, so it
// walks the jobs and stops once it has seen the queue's count of available ones.
func (s *Store) CountAvailableByPriority(ctx context.Context, queue string) (map[int]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[int]int64)
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queue]
	if q == nil {
		return out, nil
	}
	left := q.counts[stateIndex(store.StateAvailable)]
	for _, j := range s.jobs {
		if left == 0 {
			break
		}
		if j.q == q && j.State == store.StateAvailable {
			out[j.Priority]++
			left--
		}
	}
	return out, nil
}
