package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.UniqueHolder = (*Store)(nil)

// HeldUniqueKeys returns the holder of each key of refs that a job holds now (store.UniqueHolder),
// in one statement. Keys are held store-wide, whatever the queue of the ref.
func (s *Store) HeldUniqueKeys(ctx context.Context, refs []store.UniqueKeyRef) (map[store.UniqueKeyRef]string, error) {
	if len(refs) == 0 {
		return map[store.UniqueKeyRef]string{}, nil
	}
	keys := store.UniqueRefKeys(refs)
	rows, err := s.pool.Query(ctx, s.q.heldUniqueKeys, keys)
	if err != nil {
		return nil, fmt.Errorf("held unique keys: %w", err)
	}
	holders := make(map[string]string)
	var key, id string
	if _, err := pgx.ForEachRow(rows, []any{&key, &id}, func() error { holders[key] = id; return nil }); err != nil {
		return nil, fmt.Errorf("held unique keys: %w", err)
	}
	return store.HoldersByRef(refs, holders), nil
}
