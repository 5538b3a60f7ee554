package memory

import (
	"context"
	"maps"
	"sync"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.QueueBounder = (*Store)(nil)

type boundTable struct {
	mu sync.Mutex
	m  map[string]int64
}

// bounds returns the store's queue bounds, making the table on first use.
func (s *Store) bounds() *boundTable {
	s.sideMu.Lock()
	defer s.sideMu.Unlock()
	if s.boundT == nil {
		s.boundT = &boundTable{m: map[string]int64{}}
	}
	return s.boundT
}

// SetQueueMaxDepth stores queue's maximum depth; 0 removes the bound.
func (s *Store) SetQueueMaxDepth(ctx context.Context, queue string, maxDepth int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := s.bounds()
	t.mu.Lock()
	defer t.mu.Unlock()
	if maxDepth <= 0 {
		delete(t.m, queue)
	} else {
		t.m[queue] = maxDepth
	}
	return nil
}

// QueueMaxDepths returns the maximum depth of every bounded queue.
func (s *Store) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := s.bounds()
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.m), nil
}

// QueueDepths counts the non-terminal jobs of each of queues.
func (s *Store) QueueDepths(ctx context.Context, queues []string) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(queues))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range queues {
		var n int64
		if q := s.queues[name]; q != nil {
			for i, st := range store.AllStates {
				for _, nt := range store.NonTerminalStates {
					if st == nt {
						n += q.counts[i]
					}
				}
			}
		}
		out[name] = n
	}
	return out, nil
}
