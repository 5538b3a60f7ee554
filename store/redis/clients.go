package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// The client registry: one key per client holding its record as JSON, expiring with the record
// (PX), and a set of the ids written, pruned of the expired ones as they are listed. The hash tag
// keeps them in one slot, so one MGET reads them on a Redis Cluster too.
func (s *Store) clientIDsKey() string       { return s.prefix + "{clients}:ids" }
func (s *Store) clientKey(id string) string { return s.prefix + "{clients}:c:" + id }

// clientJSON is a client record as stored.
type clientJSON struct {
	ID        string              `json:"id"`
	Host      string              `json:"host,omitempty"`
	PID       int                 `json:"pid,omitempty"`
	Version   string              `json:"version,omitempty"`
	Queues    []store.ClientQueue `json:"queues"`
	StartedAt time.Time           `json:"started_at"`
	SeenAt    time.Time           `json:"seen_at"`
}

// PutClient creates or replaces the record of client r.ID, live for ttl.
func (s *Store) PutClient(ctx context.Context, r store.ClientRecord, ttl time.Duration) error {
	q := r.Queues
	if q == nil {
		q = []store.ClientQueue{}
	}
	b, err := json.Marshal(clientJSON{ID: r.ID, Host: r.Host, PID: r.PID, Version: r.Version, Queues: q,
		StartedAt: r.StartedAt.UTC(), SeenAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("redis: put client %s: %w", r.ID, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(pl goredis.Pipeliner) error {
		pl.Set(ctx, s.clientKey(r.ID), b, max(ttl, time.Millisecond))
		pl.SAdd(ctx, s.clientIDsKey(), r.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: put client %s: %w", r.ID, err)
	}
	return nil
}

// RemoveClient deletes the record of client id.
func (s *Store) RemoveClient(ctx context.Context, id string) error {
	_, err := s.rdb.TxPipelined(ctx, func(pl goredis.Pipeliner) error {
		pl.Del(ctx, s.clientKey(id))
		pl.SRem(ctx, s.clientIDsKey(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: remove client %s: %w", id, err)
	}
	return nil
}

// ListClients returns the live records in id order, marking the holder of leadership leader.
func (s *Store) ListClients(ctx context.Context, leader string) ([]store.ClientRecord, error) {
	ids, err := s.rdb.SMembers(ctx, s.clientIDsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list clients: %w", err)
	}
	lead, err := s.rdb.Get(ctx, s.leaderKey(leader)).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis: list clients: leader: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.clientKey(id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list clients: %w", err)
	}
	var out []store.ClientRecord
	var gone []any
	for i, v := range vals {
		text, ok := v.(string)
		if !ok {
			gone = append(gone, ids[i])
			continue
		}
		var c clientJSON
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			return nil, fmt.Errorf("redis: list clients: client %s: %w", ids[i], err)
		}
		out = append(out, store.ClientRecord{ID: c.ID, Host: c.Host, PID: c.PID, Version: c.Version, Queues: c.Queues,
			StartedAt: c.StartedAt, SeenAt: c.SeenAt, Leader: c.ID == lead})
	}
	if len(gone) > 0 {
		// Expired since listed: a client writing its record again now re-adds its id after this.
		s.rdb.SRem(ctx, s.clientIDsKey(), gone...)
	}
	return out, nil
}

// workflowsKey is the index of workflow ids for ListWorkflows: a sorted set of equal scores, in
// lexical (so creation) order. A workflow deleted with its last job leaves its id behind until a
// listing finds it gone and drops it.
func (s *Store) workflowsKey() string { return s.prefix + "wfs" }

// ListWorkflows returns one page of workflows in id order (newest first unless p.Ascending).
func (s *Store) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	cursor := p.After
	var out []*store.Workflow
	for len(out) <= limit {
		want := limit + 1 - len(out)
		var args []any
		if p.Ascending {
			lo := "-"
			if cursor != "" {
				lo = "(" + cursor
			}
			args = []any{"ZRANGE", s.workflowsKey(), lo, "+", "BYLEX", "LIMIT", 0, want}
		} else {
			hi := "+"
			if cursor != "" {
				hi = "(" + cursor
			}
			args = []any{"ZRANGE", s.workflowsKey(), hi, "-", "BYLEX", "REV", "LIMIT", 0, want}
		}
		ids, err := s.rdb.Do(ctx, args...).StringSlice()
		if err != nil {
			return nil, "", fmt.Errorf("redis: list workflows: %w", err)
		}
		ws, err := s.getWorkflows(ctx, ids)
		if err != nil {
			return nil, "", fmt.Errorf("redis: list workflows: %w", err)
		}
		var gone []any
		for i, w := range ws {
			if w == nil {
				gone = append(gone, ids[i])
				continue
			}
			out = append(out, w)
		}
		if len(gone) > 0 {
			s.rdb.ZRem(ctx, s.workflowsKey(), gone...)
		}
		if len(ids) < want {
			break
		}
		cursor = ids[len(ids)-1]
	}
	if len(out) > limit {
		out = out[:limit]
		return out, out[limit-1].ID, nil
	}
	return out, "", nil
}

// RunJobNow moves a scheduled or retryable job to available now, keeping its attempts, and
// announces its queue.
func (s *Store) RunJobNow(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, "run now", id, store.StateScheduled, store.StateRetryable)
}
