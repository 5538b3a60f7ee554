package memory

import (
	"context"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.UniqueHolder = (*Store)(nil)

// HeldUniqueKeys returns the holder of each key of refs that a job holds now (store.UniqueHolder).
// Keys are held store-wide, whatever the queue of the ref.
func (s *Store) HeldUniqueKeys(ctx context.Context, refs []store.UniqueKeyRef) (map[store.UniqueKeyRef]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[store.UniqueKeyRef]string)
	if len(refs) == 0 {
		return out, nil
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if h := s.holder(r.Key); h != nil && h.holds(now) {
			out[r] = h.ID
		}
	}
	return out, nil
}
