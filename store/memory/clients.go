package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// clientRegistry holds the records of the clients using the store (store.ClientRegistry).
type clientRegistry struct {
	mu      sync.Mutex
	records map[string]clientEntry
}

type clientEntry struct {
	rec   store.ClientRecord
	until time.Time
}

// PutClient creates or replaces the record of client r.ID, live for ttl, and drops expired records.
func (s *Store) PutClient(ctx context.Context, r store.ClientRecord, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	r.SeenAt, r.Leader = now, false
	r.Queues = slices.Clone(r.Queues)
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	if s.clients.records == nil {
		s.clients.records = make(map[string]clientEntry)
	}
	for id, e := range s.clients.records {
		if !e.until.After(now) {
			delete(s.clients.records, id)
		}
	}
	s.clients.records[r.ID] = clientEntry{rec: r, until: now.Add(ttl)}
	return nil
}

// RemoveClient deletes the record of client id.
func (s *Store) RemoveClient(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	delete(s.clients.records, id)
	return nil
}

// ListClients returns the live records in id order, marking the holder of leadership leader.
func (s *Store) ListClients(ctx context.Context, leader string) ([]store.ClientRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	lead := ""
	if l, ok := s.leaders[leader]; ok && l.until.After(now) {
		lead = l.id
	}
	s.mu.Unlock()
	s.clients.mu.Lock()
	out := make([]store.ClientRecord, 0, len(s.clients.records))
	for _, e := range s.clients.records {
		if e.until.After(now) {
			r := e.rec
			r.Queues = slices.Clone(r.Queues)
			r.Leader = r.ID == lead
			out = append(out, r)
		}
	}
	s.clients.mu.Unlock()
	slices.SortFunc(out, func(a, b store.ClientRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ListWorkflows returns one page of workflows in id order (newest first unless p.Ascending).
func (s *Store) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.workflows))
	for id := range s.workflows {
		if p.After == "" || (p.Ascending && id > p.After) || (!p.Ascending && id < p.After) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if !p.Ascending {
		slices.Reverse(ids)
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	out := make([]*store.Workflow, len(ids))
	for i, id := range ids {
		out[i] = s.workflows[id].export()
	}
	return out, next, nil
}

// RunJobNow moves a scheduled or retryable job to available now, keeping its attempts.
func (s *Store) RunJobNow(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, id, "run now", func(st store.State) bool {
		return st == store.StateScheduled || st == store.StateRetryable
	})
}

// SetJobPriority sets the priority of an available, scheduled or pending job; an available job is
// filed again in its heap under the new priority, so the next claim takes it in its new order.
func (s *Store) SetJobPriority(ctx context.Context, id string, priority int) (*store.Job, int, error) {
	if err := store.CheckPriority(priority); err != nil {
		return nil, 0, fmt.Errorf("memory: job %s: %w", id, err)
	}
	j, err := s.lockJob(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	defer s.mu.Unlock()
	if !store.PriorityChangeable(j.State) {
		return nil, 0, transitionError(j, store.OpChangePriority)
	}
	prev := j.Priority
	if prev != priority {
		s.unplace(j)
		j.Priority = priority
		s.place(j)
	}
	return j.export(), prev, nil
}
