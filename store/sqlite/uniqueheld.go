package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.UniqueHolder = (*Store)(nil)

// HeldUniqueKeys returns the holder of each key of refs that a job holds now (store.UniqueHolder),
// in one read. Keys are held store-wide, whatever the queue of the ref.
func (s *Store) HeldUniqueKeys(ctx context.Context, refs []store.UniqueKeyRef) (map[store.UniqueKeyRef]string, error) {
	if len(refs) == 0 {
		return map[store.UniqueKeyRef]string{}, nil
	}
	keys := store.UniqueRefKeys(refs)
	raw, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("held unique keys: %w", err)
	}
	nowUS, _ := s.nowMicro()
	rows, err := s.r.QueryContext(ctx, heldUniqueKeysSQL, string(raw), nowUS)
	if err != nil {
		return nil, fmt.Errorf("held unique keys: %w", s.schemaHint(err))
	}
	defer rows.Close()
	holders := make(map[string]string)
	for rows.Next() {
		var key, id string
		if err := rows.Scan(&key, &id); err != nil {
			return nil, fmt.Errorf("held unique keys: %w", err)
		}
		holders[key] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("held unique keys: %w", err)
	}
	return store.HoldersByRef(refs, holders), nil
}
