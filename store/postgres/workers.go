package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

// The OJS worker records (store.WorkerStore) live in {schema}.workers (migration 012). The
// statements are not prepared ahead: they run on admin requests and throttled heartbeats.

var _ store.WorkerStore = (*Store)(nil)

const (
	touchWorkerSQL = `INSERT INTO {schema}.workers AS w (id, queues, first_seen_at, last_seen_at)
	VALUES ($1, coalesce($2::text[], '{}'), now(), now())
	ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at,
		queues = CASE WHEN $2::text[] IS NULL THEN w.queues ELSE excluded.queues END
	RETURNING directive`
	workerColumns   = `id, queues, first_seen_at, last_seen_at, directive, directive_at`
	listWorkersSQL  = `SELECT ` + workerColumns + ` FROM {schema}.workers ORDER BY id`
	getWorkerSQL    = `SELECT ` + workerColumns + ` FROM {schema}.workers WHERE id = $1`
	setDirectiveSQL = `UPDATE {schema}.workers SET directive = $2,
		directive_at = CASE WHEN $2 = '' THEN NULL ELSE now() END WHERE id = $1`
	deleteWorkerSQL = `DELETE FROM {schema}.workers WHERE id = $1`
	pruneWorkersSQL = `DELETE FROM {schema}.workers WHERE last_seen_at < $1`
)

// TouchWorker records that worker id was heard from now.
func (s *Store) TouchWorker(ctx context.Context, id string, queues []string) (string, error) {
	var qs []string
	if len(queues) > 0 {
		qs = queues
	}
	var directive string
	if err := s.pool.QueryRow(ctx, s.expand.Replace(touchWorkerSQL), id, qs).Scan(&directive); err != nil {
		return "", fmt.Errorf("touch worker %s: %w", id, err)
	}
	return directive, nil
}

func scanWorker(r pgx.Row) (*store.Worker, error) {
	var w store.Worker
	var first, last, directiveAt pgtype.Timestamptz
	if err := r.Scan(&w.ID, &w.Queues, &first, &last, &w.Directive, &directiveAt); err != nil {
		return nil, err
	}
	if w.Queues == nil {
		w.Queues = []string{}
	}
	w.FirstSeenAt, w.LastSeenAt, w.DirectiveAt = timeOf(first), timeOf(last), timeOf(directiveAt)
	return &w, nil
}

// ListWorkers returns every record, by id.
func (s *Store) ListWorkers(ctx context.Context) ([]store.Worker, error) {
	rows, err := s.pool.Query(ctx, s.expand.Replace(listWorkersSQL))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	defer rows.Close()
	var out []store.Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, *w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}

// GetWorker returns one record, or store.ErrNotFound.
func (s *Store) GetWorker(ctx context.Context, id string) (*store.Worker, error) {
	w, err := scanWorker(s.pool.QueryRow(ctx, s.expand.Replace(getWorkerSQL), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get worker %s: %w", id, err)
	}
	return w, nil
}

// SetWorkerDirective sets a worker's directive.
func (s *Store) SetWorkerDirective(ctx context.Context, id, directive string) error {
	tag, err := s.pool.Exec(ctx, s.expand.Replace(setDirectiveSQL), id, directive)
	if err != nil {
		return fmt.Errorf("set directive of worker %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// DeleteWorker removes a record.
func (s *Store) DeleteWorker(ctx context.Context, id string) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.expand.Replace(deleteWorkerSQL), id)
	if err != nil {
		return false, fmt.Errorf("delete worker %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// PruneWorkers removes the records last seen before before.
func (s *Store) PruneWorkers(ctx context.Context, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, s.expand.Replace(pruneWorkersSQL), before)
	if err != nil {
		return 0, fmt.Errorf("prune workers: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

var _ store.SettingStore = (*Store)(nil)

// GetSetting returns the value under key, or nil.
func (s *Store) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, s.q.getSetting, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get setting %s: %w", key, err)
	}
	return v, nil
}

// SetSetting stores value under key; nil removes it.
func (s *Store) SetSetting(ctx context.Context, key string, value json.RawMessage) error {
	var err error
	if value == nil {
		_, err = s.pool.Exec(ctx, s.q.deleteSetting, key)
	} else {
		_, err = s.pool.Exec(ctx, s.q.setSetting, key, []byte(value))
	}
	if err != nil {
		return fmt.Errorf("set setting %s: %w", key, err)
	}
	return nil
}

var _ store.SettingSwapper = (*Store)(nil)

// SwapSetting stores new under key (nil removes it) if the stored value equals old as jsonb (nil:
// absent), in one statement.
func (s *Store) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	var tag pgconn.CommandTag
	var err error
	switch {
	case old == nil && new == nil:
		cur, err := s.GetSetting(ctx, key)
		return err == nil && cur == nil, err
	case old == nil:
		tag, err = s.pool.Exec(ctx, s.q.addSetting, key, []byte(new))
	case new == nil:
		tag, err = s.pool.Exec(ctx, s.q.dropSetting, key, []byte(old))
	default:
		tag, err = s.pool.Exec(ctx, s.q.swapSetting, key, []byte(old), []byte(new))
	}
	if err != nil {
		return false, fmt.Errorf("swap setting %s: %w", key, err)
	}
	return tag.RowsAffected() == 1, nil
}
