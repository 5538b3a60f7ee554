package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// workerRegistry holds the worker records (store.WorkerStore) and the settings
// (store.SettingStore), apart from the jobs' lock.
type workerRegistry struct {
	mu       sync.Mutex
	byID     map[string]*store.Worker
	settings map[string]json.RawMessage
}

var _ store.WorkerStore = (*Store)(nil)

func copyWorker(w *store.Worker) store.Worker {
	out := *w
	out.Queues = slices.Clone(w.Queues)
	return out
}

// TouchWorker records that worker id was heard from now.
func (s *Store) TouchWorker(ctx context.Context, id string, queues []string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UTC()
	if r.byID == nil {
		r.byID = map[string]*store.Worker{}
	}
	w := r.byID[id]
	if w == nil {
		w = &store.Worker{ID: id, FirstSeenAt: now}
		r.byID[id] = w
	}
	w.LastSeenAt = now
	if len(queues) > 0 {
		w.Queues = slices.Clone(queues)
	}
	return w.Directive, nil
}

// ListWorkers returns every record, by id.
func (s *Store) ListWorkers(ctx context.Context) ([]store.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]store.Worker, 0, len(r.byID))
	for _, w := range r.byID {
		out = append(out, copyWorker(w))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetWorker returns one record, or store.ErrNotFound.
func (s *Store) GetWorker(ctx context.Context, id string) (*store.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[id]
	if w == nil {
		return nil, store.ErrNotFound
	}
	out := copyWorker(w)
	return &out, nil
}

// SetWorkerDirective sets a worker's directive.
func (s *Store) SetWorkerDirective(ctx context.Context, id, directive string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[id]
	if w == nil {
		return store.ErrNotFound
	}
	w.Directive = directive
	w.DirectiveAt = time.Time{}
	if directive != "" {
		w.DirectiveAt = time.Now().UTC()
	}
	return nil
}

// DeleteWorker removes a record.
func (s *Store) DeleteWorker(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byID[id]
	delete(r.byID, id)
	return ok, nil
}

// PruneWorkers removes the records last seen before before.
func (s *Store) PruneWorkers(ctx context.Context, before time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, w := range r.byID {
		if w.LastSeenAt.Before(before) {
			delete(r.byID, id)
			n++
		}
	}
	return n, nil
}

var _ store.SettingStore = (*Store)(nil)

// GetSetting returns the value under key, or nil.
func (s *Store) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.settings[key]), nil
}

// SetSetting stores value under key; nil removes it.
func (s *Store) SetSetting(ctx context.Context, key string, value json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	if value == nil {
		delete(r.settings, key)
		return nil
	}
	if r.settings == nil {
		r.settings = map[string]json.RawMessage{}
	}
	r.settings[key] = bytes.Clone(value)
	return nil
}

var _ store.SettingSwapper = (*Store)(nil)

// SwapSetting stores new under key (nil removes it) if the stored value is byte for byte old (nil:
// absent), under the lock that guards the settings.
func (s *Store) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := &s.workers
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.settings[key]
	if ok != (old != nil) || !bytes.Equal(cur, old) {
		return false, nil
	}
	if new == nil {
		delete(r.settings, key)
		return true, nil
	}
	if r.settings == nil {
		r.settings = map[string]json.RawMessage{}
	}
	r.settings[key] = bytes.Clone(new)
	return true, nil
}
