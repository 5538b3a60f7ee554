package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// rateKey is the bookkeeping of one rate key: its stored limit, if any, the key's jobs per state and
// its current rate window. It exists while the key has a limit or stored jobs.
type rateKey struct {
	name  string
	limit store.RateLimit
	// set says whether a limit is stored (a key without one limits nothing).
	set    bool
	counts [8]int64
	// windowStart is when the current (or last) window opened; windowCount counts its claims.
	windowStart time.Time
	windowCount int64
}

// windowed reports whether the limit bounds starts per window.
func (rk *rateKey) windowed() bool {
	return rk.set && rk.limit.Rate > 0 && rk.limit.Period > 0
}

// windowOpen reports whether a window is open at now.
func (rk *rateKey) windowOpen(now time.Time) bool {
	return rk.windowed() && !rk.windowStart.IsZero() && now.Before(rk.windowStart.Add(rk.limit.Period))
}

// blocked reports whether the key can start no job at now and, when a rate window is what stops it,
// the window's end (zero when only MaxActive does).
func (rk *rateKey) blocked(now time.Time) (bool, time.Time) {
	if !rk.set {
		return false, time.Time{}
	}
	if rk.windowOpen(now) && rk.windowCount >= int64(rk.limit.Rate) {
		return true, rk.windowStart.Add(rk.limit.Period)
	}
	if m := rk.limit.MaxActive; m > 0 && rk.counts[stateIndex(store.StateActive)] >= int64(m) {
		return true, time.Time{}
	}
	return false, time.Time{}
}

// hit adds to hits the key's exhausted limit (see blocked), named key, unless hits has it already.
func (rk *rateKey) hit(hits []store.LimitHit, key string, now time.Time) []store.LimitHit {
	var wc int64
	if rk.windowOpen(now) {
		wc = rk.windowCount
	}
	return store.AddLimitHit(hits, store.NewLimitHit(key, rk.limit, rk.counts[stateIndex(store.StateActive)], wc))
}

// spentKeys adds to hits the keys of the claimed jobs that still have a job available in q of the
// claim's kinds (every kind when kinds is empty): as their exhausted limit when the claim leaves them
// without room, else with HasRoom. Jobs of the key in other queues or of other kinds are not the
// claim's to report; s.mu must be held.
func (s *Store) spentKeys(q *queue, kinds []string, claimed []*store.Job, hits []store.LimitHit, now time.Time) []store.LimitHit {
	for _, j := range claimed {
		if j.RateKey == "" {
			continue
		}
		rk := s.rates[j.RateKey]
		if rk == nil || !rk.set || rk.counts[stateIndex(store.StateAvailable)] == 0 || !q.waitsFor(j.RateKey, kinds) {
			continue
		}
		if blocked, _ := rk.blocked(now); blocked {
			hits = rk.hit(hits, j.RateKey, now)
		} else {
			hits = store.AddLimitHit(hits, store.LimitHit{Key: j.RateKey, HasRoom: true})
		}
	}
	return hits
}

// waitsFor reports whether q has an available job of rate key key of one of kinds (any kind when
// kinds is empty); s.mu must be held.
func (q *queue) waitsFor(key string, kinds []string) bool {
	if len(kinds) == 0 {
		for _, byKey := range q.limited {
			if h := byKey[key]; h != nil && h.top() != nil {
				return true
			}
		}
		return false
	}
	for _, k := range kinds {
		if h := q.limited[k][key]; h != nil && h.top() != nil {
			return true
		}
	}
	return false
}

// started counts a claim of one of the key's jobs at now in the rate window, opening one if none is.
func (rk *rateKey) started(now time.Time) {
	if !rk.windowed() {
		return
	}
	if !rk.windowOpen(now) {
		rk.windowStart, rk.windowCount = now, 0
	}
	rk.windowCount++
}

// setLimit stores l as the key's limit.
func (rk *rateKey) setLimit(l store.RateLimit) {
	rk.limit, rk.set = l, true
}

// used reports whether any stored job has the key.
func (rk *rateKey) used() bool {
	for _, n := range rk.counts {
		if n != 0 {
			return true
		}
	}
	return false
}

// rateKey returns the bookkeeping of key, creating it; s.mu must be held.
func (s *Store) rateKey(key string) *rateKey {
	rk := s.rates[key]
	if rk == nil {
		rk = &rateKey{name: key}
		s.rates[key] = rk
	}
	return rk
}

// dropRateKeyIfUnused forgets rk when it has neither a limit nor jobs; s.mu must be held.
func (s *Store) dropRateKeyIfUnused(rk *rateKey) {
	if !rk.set && !rk.used() && s.rates[rk.name] == rk {
		delete(s.rates, rk.name)
	}
}

// validLimit checks a limit's fields. A zero field bounds nothing (a Rate without a Period included,
// as the contract reads), so only negative fields and unknown actions are refused.
func validLimit(l store.RateLimit) error {
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return fmt.Errorf("rate limit %+v has a negative field: %w", l, store.ErrInvalidParams)
	}
	switch l.OnLimit {
	case "", store.LimitWait, store.LimitReschedule, store.LimitDrop:
		return nil
	}
	return fmt.Errorf("rate limit on-limit action %q (want wait, reschedule or drop): %w", l.OnLimit, store.ErrInvalidParams)
}

// SetRateLimit creates or replaces the limit under key and announces every queue holding available
// jobs with the key, whose producers may now claim more.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("memory: set rate limit: empty key: %w", store.ErrInvalidParams)
	}
	if err := validLimit(l); err != nil {
		return fmt.Errorf("memory: set rate limit %s: %w", key, err)
	}
	s.mu.Lock()
	s.rateKey(key).setLimit(l)
	ns := s.wakeKey(key)
	s.mu.Unlock()
	s.publish(ns)
	return nil
}

// DeleteRateLimit removes the limit under key, so its jobs are no longer limited, and announces the
// queues holding its available jobs.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	rk := s.rates[key]
	if rk == nil || !rk.set {
		s.mu.Unlock()
		return rateNotFound(key)
	}
	rk.limit, rk.set = store.RateLimit{}, false
	rk.windowStart, rk.windowCount = time.Time{}, 0
	s.dropRateKeyIfUnused(rk)
	ns := s.wakeKey(key)
	s.mu.Unlock()
	s.publish(ns)
	return nil
}

func rateNotFound(key string) error {
	return fmt.Errorf("memory: rate limit %s: %w", key, store.ErrNotFound)
}

// wakeKey returns a NotifyInsert for each queue holding available jobs with key; s.mu must be held.
func (s *Store) wakeKey(key string) []store.Notification {
	var ns []store.Notification
	for _, q := range s.queues {
		for _, byKey := range q.limited {
			if h := byKey[key]; h != nil && h.top() != nil {
				ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q.name})
				break
			}
		}
	}
	return ns
}

// GetRateLimit returns the limit under key with its use, or an error matching store.ErrNotFound.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rk := s.rates[key]
	if rk == nil || !rk.set {
		return nil, rateNotFound(key)
	}
	now := time.Now()
	return s.limitInfo(rk, now, s.dueWaiting(now, key)), nil
}

// ListRateLimits returns every stored limit with its use, in key order.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	due := s.dueWaiting(now, "")
	var out []*store.RateLimitInfo
	for _, rk := range s.rates {
		if rk.set {
			out = append(out, s.limitInfo(rk, now, due))
		}
	}
	slices.SortFunc(out, func(a, b *store.RateLimitInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// limitInfo reports rk's limit and use; due counts the due scheduled and retryable jobs per key (see
// dueWaiting); s.mu must be held. The use of a tenant's limit key is the tenant's jobs, whatever
// their rate keys (the limit bounds them all): its counts, not those of the jobs naming the key.
func (s *Store) limitInfo(rk *rateKey, now time.Time, due map[string]int64) *store.RateLimitInfo {
	out := &store.RateLimitInfo{Key: rk.name, Limit: rk.limit}
	if tenant, ok := store.TenantOfLimitKey(rk.name); ok {
		if ts := s.tenants[tenant]; ts != nil {
			out.Active = ts.counts[stateIndex(store.StateActive)]
			out.Waiting = ts.counts[stateIndex(store.StateAvailable)]
		}
		out.Waiting += due[tenantDueKey(tenant)]
	} else {
		out.Active = rk.counts[stateIndex(store.StateActive)]
		out.Waiting = rk.counts[stateIndex(store.StateAvailable)] + due[rk.name]
	}
	if rk.windowOpen(now) {
		out.WindowStart, out.WindowCount = rk.windowStart, rk.windowCount
	}
	return out
}

// tenantDueKey is the entry of dueWaiting's map that counts a tenant's jobs: a newline, which no
// stored key starts with, before the tenant, so that it never meets a rate key's entry.
func tenantDueKey(tenant string) string { return "\n" + tenant }

// dueWaiting counts, per rate key, and per tenant under tenantDueKey (only key's when key is not
// empty: its jobs, or its tenant's for a tenant's limit key), the scheduled and retryable jobs that
// are due at now but not yet promoted; s.mu must be held. It visits only the due part of each
// queue's waiting heap.
func (s *Store) dueWaiting(now time.Time, key string) map[string]int64 {
	due := map[string]int64{}
	tenant, byTenant := store.TenantOfLimitKey(key)
	cut := nanos(now)
	for _, q := range s.queues {
		q.waiting.eachUpTo(cut, func(e *entry) {
			if !e.live() {
				return
			}
			if j := e.j; j.RateKey != "" && (key == "" || j.RateKey == key) {
				due[j.RateKey]++
			}
			if j := e.j; j.Tenant != "" && (key == "" || (byTenant && j.Tenant == tenant)) {
				due[tenantDueKey(j.Tenant)]++
			}
		})
	}
	return due
}

// windowDue returns the earliest end of the open, exhausted rate window of a key with available jobs
// in q, and false if there is none; s.mu must be held.
func (q *queue) windowDue(now time.Time) (time.Time, bool) {
	var first time.Time
	for _, byKey := range q.limited {
		for _, h := range byKey {
			e := h.top()
			if e == nil {
				continue
			}
			if blocked, until := e.j.rk.blocked(now); blocked && !until.IsZero() && (first.IsZero() || until.Before(first)) {
				first = until
			}
		}
	}
	return first, !first.IsZero()
}
