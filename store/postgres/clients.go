package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

// sqlPutClient drops expired client records and creates or replaces client $1's, live for $7
// microseconds.
const sqlPutClient = `WITH gone AS (
	DELETE FROM {schema}.clients WHERE expires_at <= now() AND id <> $1
)
INSERT INTO {schema}.clients (id, host, pid, version, queues, started_at, seen_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, now(), now() + make_interval(secs => $7::bigint / 1e6))
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, version = excluded.version,
	queues = excluded.queues, started_at = excluded.started_at, seen_at = excluded.seen_at,
	expires_at = excluded.expires_at`

// sqlRemoveClient deletes client $1's record.
const sqlRemoveClient = `DELETE FROM {schema}.clients WHERE id = $1`

// sqlListClients lists the live records, marking the live holder of leadership $1.
const sqlListClients = `SELECT c.id, c.host, c.pid, c.version, c.queues, c.started_at, c.seen_at,
	l.leader_id IS NOT NULL
FROM {schema}.clients c
LEFT JOIN {schema}.leader l ON l.name = $1 AND l.leader_id = c.id AND l.expires_at > now()
WHERE c.expires_at > now()
ORDER BY c.id`

// PutClient creates or replaces the record of client r.ID, live for ttl, in one statement that
// also drops expired records.
func (s *Store) PutClient(ctx context.Context, r store.ClientRecord, ttl time.Duration) error {
	q := r.Queues
	if q == nil {
		q = []store.ClientQueue{}
	}
	queues, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	if _, err := s.pool.Exec(ctx, s.expand.Replace(sqlPutClient), r.ID, r.Host, r.PID, r.Version, queues,
		r.StartedAt, ttl.Microseconds()); err != nil {
		return fmt.Errorf("put client %s: %w", r.ID, err)
	}
	return nil
}

// RemoveClient deletes the record of client id.
func (s *Store) RemoveClient(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, s.expand.Replace(sqlRemoveClient), id); err != nil {
		return fmt.Errorf("remove client %s: %w", id, err)
	}
	return nil
}

// ListClients returns the live records in id order, marking the holder of leadership leader.
func (s *Store) ListClients(ctx context.Context, leader string) ([]store.ClientRecord, error) {
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlListClients), leader)
	if err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	defer rows.Close()
	var out []store.ClientRecord
	for rows.Next() {
		var r store.ClientRecord
		var queues []byte
		if err := rows.Scan(&r.ID, &r.Host, &r.PID, &r.Version, &queues, &r.StartedAt, &r.SeenAt, &r.Leader); err != nil {
			return nil, fmt.Errorf("list clients: %w", err)
		}
		if err := json.Unmarshal(queues, &r.Queues); err != nil {
			return nil, fmt.Errorf("list clients: client %s: queues: %w", r.ID, err)
		}
		r.StartedAt, r.SeenAt = r.StartedAt.UTC(), r.SeenAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list clients: %w", err)
	}
	return out, nil
}

// sqlListWorkflows lists the workflows after cursor $1 in id order, at most $2;
// sqlListWorkflowsDesc before $1, newest first.
const (
	sqlListWorkflows     = `SELECT ` + workflowCols + ` WHERE w.id > $1 ORDER BY w.id LIMIT $2`
	sqlListWorkflowsDesc = `SELECT ` + workflowCols + ` WHERE w.id < $1 ORDER BY w.id DESC LIMIT $2`
)

// ListWorkflows returns one page of workflows in id order (newest first unless p.Ascending), with
// their members' counts, in one statement.
func (s *Store) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	query, cursor := sqlListWorkflows, p.After
	if !p.Ascending {
		query = sqlListWorkflowsDesc
		if cursor == "" {
			cursor = "g" // workflow ids are UUID text: every one sorts below "g", in any collation
		}
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(query), cursor, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	defer rows.Close()
	var out []*store.Workflow
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list workflows: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("list workflows: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// sqlRunJobNow moves scheduled or retryable job $1 to available now, keeping its attempts.
var sqlRunJobNow = makeAvailable(``, `IN ('scheduled', 'retryable')`)

// RunJobNow moves a scheduled or retryable job to available now, keeping its attempts, and
// announces its queue, in one statement. Other states give a *store.TransitionError.
func (s *Store) RunJobNow(ctx context.Context, id string) (*store.Job, error) {
	return s.transition(ctx, s.expand.Replace(sqlRunJobNow), "run now", id)
}

// SetJobPriority sets the priority of an available, scheduled or pending job in one statement; the
// claim reads the column, so the job is claimed in its new order at once.
func (s *Store) SetJobPriority(ctx context.Context, id string, priority int) (*store.Job, int, error) {
	if err := store.CheckPriority(priority); err != nil {
		return nil, 0, fmt.Errorf("%s job %s: %w", store.OpChangePriority, id, err)
	}
	u, ok := parseUUID(id)
	if !ok {
		return nil, 0, notFound(id)
	}
	var prev int32
	j, err := s.transitionWith(ctx, store.OpChangePriority, id, func(dest []any) error {
		return s.pool.QueryRow(ctx, s.expand.Replace(sqlSetJobPriority), u, priority).
			Scan(append([]any{&prev}, dest...)...)
	})
	if err != nil {
		return nil, 0, err
	}
	return j, int(prev), nil
}
