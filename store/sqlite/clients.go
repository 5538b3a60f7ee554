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

// putClientSQL: ?1 id, ?2 host, ?3 pid, ?4 version, ?5 queues (JSON), ?6 started, ?7 now, ?8 expires.
const putClientSQL = `INSERT INTO pronto_clients (id, host, pid, version, queues, started_at, seen_at, expires_at)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
	ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, version = excluded.version,
		queues = excluded.queues, started_at = excluded.started_at, seen_at = excluded.seen_at,
		expires_at = excluded.expires_at`

// dropExpiredClientsSQL: ?1 now.
const dropExpiredClientsSQL = `DELETE FROM pronto_clients WHERE expires_at <= ?1`

// removeClientSQL: ?1 id.
const removeClientSQL = `DELETE FROM pronto_clients WHERE id = ?1`

// listClientsSQL: ?1 now, ?2 leadership name.
const listClientsSQL = `SELECT c.id, c.host, c.pid, c.version, c.queues, c.started_at, c.seen_at,
		l.leader_id IS NOT NULL
	FROM pronto_clients c
	LEFT JOIN pronto_leaders l ON l.name = ?2 AND l.leader_id = c.id AND l.expires_at > ?1
	WHERE c.expires_at > ?1
	ORDER BY c.id`

// PutClient creates or replaces the record of client r.ID, live for ttl, dropping expired records,
// in one write transaction.
func (s *Store) PutClient(ctx context.Context, r store.ClientRecord, ttl time.Duration) error {
	queues, err := json.Marshal(nonNilQueues(r.Queues))
	if err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	nowUS, _ := s.nowMicro()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, dropExpiredClientsSQL, nowUS); err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, s.schemaHint(err))
	}
	if _, err := tx.ExecContext(ctx, putClientSQL, r.ID, r.Host, r.PID, r.Version, string(queues),
		r.StartedAt.UnixMicro(), nowUS, nowUS+ttl.Microseconds()); err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	return nil
}

// RemoveClient deletes the record of client id.
func (s *Store) RemoveClient(ctx context.Context, id string) error {
	if _, err := s.w.ExecContext(ctx, removeClientSQL, id); err != nil {
		return fmt.Errorf("remove client %s: %w", id, s.schemaHint(err))
	}
	return nil
}

// ListClients returns the live records in id order, marking the holder of leadership leader.
func (s *Store) ListClients(ctx context.Context, leader string) ([]store.ClientRecord, error) {
	nowUS, _ := s.nowMicro()
	rows, err := s.r.QueryContext(ctx, listClientsSQL, nowUS, leader)
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", s.schemaHint(err))
	}
	defer rows.Close()
	var out []store.ClientRecord
	for rows.Next() {
		var r store.ClientRecord
		var queues string
		var started, seen int64
		if err := rows.Scan(&r.ID, &r.Host, &r.PID, &r.Version, &queues, &started, &seen, &r.Leader); err != nil {
			return nil, fmt.Errorf("list clients: %w", err)
		}
		if err := json.Unmarshal([]byte(queues), &r.Queues); err != nil {
			return nil, fmt.Errorf("list clients: client %s: queues: %w", r.ID, err)
		}
		r.StartedAt, r.SeenAt = microTime(started), microTime(seen)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

func nonNilQueues(q []store.ClientQueue) []store.ClientQueue {
	if q == nil {
		return []store.ClientQueue{}
	}
	return q
}

// listWorkflowsSQL: ?1 cursor, ?2 limit; listWorkflowsDescSQL the same, newest first.
const (
	listWorkflowsSQL     = `SELECT id FROM pronto_workflows WHERE id > ?1 ORDER BY id LIMIT ?2`
	listWorkflowsDescSQL = `SELECT id FROM pronto_workflows WHERE id < ?1 ORDER BY id DESC LIMIT ?2`
)

// ListWorkflows returns one page of workflows in id order (newest first unless p.Ascending), read
// in one read transaction.
func (s *Store) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	query, cursor := listWorkflowsSQL, p.After
	if !p.Ascending {
		query = listWorkflowsDescSQL
		if cursor == "" {
			cursor = "\uffff" // above every id made of ASCII characters
		}
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, query, cursor, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", s.schemaHint(err))
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("list workflows: %w", err)
		}
		ids = append(ids, id)
	}
	if err := closeRows(rows); err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	out := make([]*store.Workflow, 0, len(ids))
	for _, id := range ids {
		w, err := loadWorkflow(ctx, tx, id)
		if err != nil {
			return nil, "", fmt.Errorf("list workflows: workflow %s: %w", id, err)
		}
		out = append(out, w)
	}
	return out, next, nil
}

// runJobNowSQL: ?1 now, ?2 id.
const runJobNowSQL = `UPDATE pronto_jobs SET state = 'available', scheduled_at = ?1
	WHERE id = ?2 AND state IN ('scheduled', 'retryable')
	RETURNING ` + jobColumns

// RunJobNow moves a scheduled or retryable job to available now, keeping its attempts, and wakes
// its queue's producers.
func (s *Store) RunJobNow(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.transition(ctx, "run now", runJobNowSQL, id, nil)
	if err != nil {
		return nil, err
	}
	s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
	return j, nil
}

// SetJobPriority sets the priority of an available, scheduled or pending job. One IMMEDIATE write
// transaction reads the priority it had and updates it, so no other write comes in between; the
// claim reads the column, so the job is claimed in its new order at once.
func (s *Store) SetJobPriority(ctx context.Context, id string, priority int) (*store.Job, int, error) {
	op := store.OpChangePriority
	if err := store.CheckPriority(priority); err != nil {
		return nil, 0, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	r, err := s.begin(ctx, jobPrioritySQL, setJobPrioritySQL)
	if err != nil {
		return nil, 0, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var (
		state string
		prev  int64
	)
	err = r.QueryRowContext(ctx, jobPrioritySQL, id).Scan(&state, &prev)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("%s job %s: %w", op, id, store.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	if !store.PriorityChangeable(store.State(state)) {
		return nil, 0, refused(id, op, store.State(state))
	}
	j, err := firstJob(r.QueryContext(ctx, setJobPrioritySQL, int64(priority), id))
	if err != nil {
		return nil, 0, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	if err := r.tx.Commit(); err != nil {
		return nil, 0, fmt.Errorf("%s job %s: commit: %w", op, id, err)
	}
	return j, int(prev), nil
}
