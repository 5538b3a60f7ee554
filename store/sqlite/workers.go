package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// The OJS worker records (store.WorkerStore) live in pronto_workers (migration 010).

var _ store.WorkerStore = (*Store)(nil)

const (
	touchWorkerSQL = `INSERT INTO pronto_workers (id, queues, first_seen_at, last_seen_at) VALUES (?1, coalesce(?2, '[]'), ?3, ?3)
	ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at,
		queues = CASE WHEN ?2 IS NULL THEN pronto_workers.queues ELSE excluded.queues END
	RETURNING directive`
	workerColumns   = `id, queues, first_seen_at, last_seen_at, directive, directive_at`
	listWorkersSQL  = `SELECT ` + workerColumns + ` FROM pronto_workers ORDER BY id`
	getWorkerSQL    = `SELECT ` + workerColumns + ` FROM pronto_workers WHERE id = ?1`
	setDirectiveSQL = `UPDATE pronto_workers SET directive = ?2, directive_at = ?3 WHERE id = ?1`
	deleteWorkerSQL = `DELETE FROM pronto_workers WHERE id = ?1`
	pruneWorkersSQL = `DELETE FROM pronto_workers WHERE last_seen_at < ?1`
)

// TouchWorker records that worker id was heard from now.
func (s *Store) TouchWorker(ctx context.Context, id string, queues []string) (string, error) {
	st, err := s.stmt(ctx, touchWorkerSQL)
	if err != nil {
		return "", fmt.Errorf("touch worker %s: %w", id, err)
	}
	var qs sql.NullString
	if len(queues) > 0 {
		b, err := json.Marshal(queues)
		if err != nil {
			return "", fmt.Errorf("touch worker %s: %w", id, err)
		}
		qs = sql.NullString{String: string(b), Valid: true}
	}
	nowUS, _ := s.nowMicro()
	var directive string
	if err := st.QueryRowContext(ctx, id, qs, nowUS).Scan(&directive); err != nil {
		return "", fmt.Errorf("touch worker %s: %w", id, s.schemaHint(err))
	}
	return directive, nil
}

func scanWorker(r rowScanner) (*store.Worker, error) {
	var w store.Worker
	var queues string
	var first, last int64
	var directiveAt sql.NullInt64
	if err := r.Scan(&w.ID, &queues, &first, &last, &w.Directive, &directiveAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(queues), &w.Queues); err != nil {
		return nil, fmt.Errorf("worker %s: queues %q: %w", w.ID, queues, err)
	}
	w.FirstSeenAt, w.LastSeenAt = microTime(first), microTime(last)
	if directiveAt.Valid {
		w.DirectiveAt = microTime(directiveAt.Int64)
	}
	return &w, nil
}

// ListWorkers returns every record, by id.
func (s *Store) ListWorkers(ctx context.Context) ([]store.Worker, error) {
	rows, err := s.r.QueryContext(ctx, listWorkersSQL)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", s.schemaHint(err))
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
	w, err := scanWorker(s.r.QueryRowContext(ctx, getWorkerSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get worker %s: %w", id, s.schemaHint(err))
	}
	return w, nil
}

// SetWorkerDirective sets a worker's directive.
func (s *Store) SetWorkerDirective(ctx context.Context, id, directive string) error {
	st, err := s.stmt(ctx, setDirectiveSQL)
	if err != nil {
		return fmt.Errorf("set directive of worker %s: %w", id, err)
	}
	var at sql.NullInt64
	if directive != "" {
		nowUS, _ := s.nowMicro()
		at = sql.NullInt64{Int64: nowUS, Valid: true}
	}
	res, err := st.ExecContext(ctx, id, directive, at)
	if err != nil {
		return fmt.Errorf("set directive of worker %s: %w", id, s.schemaHint(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("set directive of worker %s: %w", id, err)
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// DeleteWorker removes a record.
func (s *Store) DeleteWorker(ctx context.Context, id string) (bool, error) {
	n, err := s.execCount(ctx, deleteWorkerSQL, id)
	if err != nil {
		return false, fmt.Errorf("delete worker %s: %w", id, err)
	}
	return n > 0, nil
}

// PruneWorkers removes the records last seen before before.
func (s *Store) PruneWorkers(ctx context.Context, before time.Time) (int, error) {
	n, err := s.execCount(ctx, pruneWorkersSQL, before.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("prune workers: %w", err)
	}
	return int(n), nil
}

// execCount runs a prepared write and returns the rows it changed.
func (s *Store) execCount(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, s.schemaHint(err)
	}
	return res.RowsAffected()
}

var _ store.SettingStore = (*Store)(nil)

// GetSetting returns the value under key, or nil.
func (s *Store) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	var v string
	err := s.r.QueryRowContext(ctx, getSettingSQL, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get setting %s: %w", key, s.schemaHint(err))
	}
	return json.RawMessage(v), nil
}

// SetSetting stores value under key; nil removes it.
func (s *Store) SetSetting(ctx context.Context, key string, value json.RawMessage) error {
	var err error
	if value == nil {
		_, err = s.execCount(ctx, deleteSettingSQL, key)
	} else {
		nowUS, _ := s.nowMicro()
		_, err = s.execCount(ctx, setSettingSQL, key, string(value), nowUS)
	}
	if err != nil {
		return fmt.Errorf("set setting %s: %w", key, err)
	}
	return nil
}

var _ store.SettingSwapper = (*Store)(nil)

// SwapSetting stores new under key (nil removes it) if the stored text is byte for byte old (nil:
// absent), in one statement.
func (s *Store) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	var n int64
	var err error
	nowUS, _ := s.nowMicro()
	switch {
	case old == nil && new == nil:
		var cur json.RawMessage
		if cur, err = s.GetSetting(ctx, key); err != nil {
			return false, err
		}
		return cur == nil, nil
	case old == nil:
		n, err = s.execCount(ctx, addSettingSQL, key, string(new), nowUS)
	case new == nil:
		n, err = s.execCount(ctx, dropSettingSQL, key, string(old))
	default:
		n, err = s.execCount(ctx, swapSettingSQL, key, string(old), string(new), nowUS)
	}
	if err != nil {
		return false, fmt.Errorf("swap setting %s: %w", key, err)
	}
	return n == 1, nil
}
