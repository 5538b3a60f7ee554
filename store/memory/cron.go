package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.CronStore  = (*Store)(nil)
	_ store.CronPauser = (*Store)(nil)
)

type cronTable struct {
	mu     sync.Mutex
	byName map[string]*store.CronSchedule
}

// crons returns the store's cron schedules, making the table on first use.
func (s *Store) crons() *cronTable {
	s.sideMu.Lock()
	defer s.sideMu.Unlock()
	if s.cronT == nil {
		s.cronT = &cronTable{byName: make(map[string]*store.CronSchedule)}
	}
	return s.cronT
}

func cloneCron(c *store.CronSchedule) *store.CronSchedule {
	out := *c
	out.Template = slices.Clone(c.Template)
	return &out
}

// CronCreate stores a new cron schedule; an existing name gives store.ErrDuplicate.
func (s *Store) CronCreate(_ context.Context, c *store.CronSchedule) error {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byName[c.Name]; ok {
		return fmt.Errorf("create cron schedule %q: %w", c.Name, store.ErrDuplicate)
	}
	t.byName[c.Name] = cloneCron(c)
	return nil
}

// CronGet returns one cron schedule, or store.ErrNotFound.
func (s *Store) CronGet(_ context.Context, name string) (*store.CronSchedule, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("cron schedule %q: %w", name, store.ErrNotFound)
	}
	return cloneCron(c), nil
}

// CronList returns every cron schedule, by name.
func (s *Store) CronList(_ context.Context) ([]*store.CronSchedule, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*store.CronSchedule, 0, len(t.byName))
	for _, c := range t.byName {
		out = append(out, cloneCron(c))
	}
	slices.SortFunc(out, func(a, b *store.CronSchedule) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// CronDelete removes a cron schedule and returns it, or gives store.ErrNotFound.
func (s *Store) CronDelete(_ context.Context, name string) (*store.CronSchedule, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("delete cron schedule %q: %w", name, store.ErrNotFound)
	}
	delete(t.byName, name)
	return c, nil
}

// CronSetEnabled pauses or resumes a cron schedule (store.CronPauser).
func (s *Store) CronSetEnabled(_ context.Context, name string, enabled bool, next time.Time) (*store.CronSchedule, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("cron schedule %q: %w", name, store.ErrNotFound)
	}
	c.Enabled = enabled
	if !next.IsZero() {
		c.NextRunAt = next
	}
	return cloneCron(c), nil
}

// CronDue returns up to limit enabled schedules due at now, earliest first.
func (s *Store) CronDue(_ context.Context, now time.Time, limit int) ([]*store.CronSchedule, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*store.CronSchedule
	for _, c := range t.byName {
		if c.Enabled && !c.NextRunAt.After(now) {
			out = append(out, cloneCron(c))
		}
	}
	slices.SortFunc(out, func(a, b *store.CronSchedule) int {
		if r := a.NextRunAt.Compare(b.NextRunAt); r != 0 {
			return r
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CronAdvance moves a schedule past its due occurrence if its guard holds.
func (s *Store) CronAdvance(_ context.Context, a store.CronAdvance) (bool, error) {
	t := s.crons()
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.byName[a.Name]
	if !ok || c.ID != a.ID || !c.NextRunAt.Equal(a.From) {
		return false, nil
	}
	c.NextRunAt, c.LastRunAt = a.Next, a.RunAt
	if a.JobID != "" {
		c.LastJobID = a.JobID
		c.RunCount++
	}
	return true, nil
}

// StoreNow returns the time by which the store judges what is due: this process's clock, the only
// one that shares the store.
func (s *Store) StoreNow(context.Context) (time.Time, error) { return time.Now(), nil }
