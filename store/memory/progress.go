package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// SetProgress records progress for the job's current run when it is active.
func (s *Store) SetProgress(ctx context.Context, p store.ProgressParams) (bool, error) {
	j, err := s.lockJob(ctx, p.ID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	if j.State != store.StateActive || (p.Token != "" && p.Token != j.ClaimToken) {
		return false, nil
	}
	var checkpoint json.RawMessage
	if j.prog != nil {
		checkpoint = j.prog.Checkpoint // kept across runs
	}
	if p.Checkpoint != nil {
		checkpoint = bytes.Clone(p.Checkpoint)
	}
	prev := j.prog
	if prev == nil || !prev.RunStartedAt.Equal(j.StartedAt) {
		prev = nil // a new run starts afresh
	}
	next := &store.Progress{RunStartedAt: j.StartedAt, UpdatedAt: time.Now().UTC(), Checkpoint: checkpoint}
	if prev != nil {
		next.Value, next.Data = prev.Value, prev.Data
	}
	if p.Value != nil && (next.Value == nil || *p.Value > *next.Value) {
		v := *p.Value
		next.Value = &v
	}
	if p.Data != nil {
		next.Data = bytes.Clone(p.Data)
	}
	j.prog = next
	return true, nil
}

// GetProgress returns the latest progress reported for the job, or nil.
func (s *Store) GetProgress(ctx context.Context, id string) (*store.Progress, error) {
	j, err := s.lockJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if j.prog == nil {
		return nil, nil
	}
	out := *j.prog
	if out.Value != nil {
		v := *out.Value
		out.Value = &v
	}
	out.Data = bytes.Clone(out.Data)
	out.Checkpoint = bytes.Clone(out.Checkpoint)
	return &out, nil
}

// GetProgressBatch returns the progress of each of ids that has any, one job at a time.
func (s *Store) GetProgressBatch(ctx context.Context, ids []string) (map[string]*store.Progress, error) {
	return store.GetProgressEach(ctx, s, ids)
}
