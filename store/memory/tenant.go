package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.TenantStore = (*Store)(nil)

// tenantStat is what the store keeps of one tenant: its stored weight and its jobs per state
// (kept by place and unplace, so only jobs with a tenant pay for it). It exists while the tenant
// has a stored weight or jobs.
type tenantStat struct {
	weight  int // 0: none stored
	updated time.Time
	counts  [8]int64
}

// countTenant adds d to tenant's jobs in state index i; s.mu must be held.
func (s *Store) countTenant(tenant string, i int, d int64) {
	if s.tenants == nil {
		s.tenants = make(map[string]*tenantStat)
	}
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantStat{}
		s.tenants[tenant] = ts
	}
	ts.counts[i] += d
	if d < 0 {
		s.dropTenantIfUnused(tenant, ts)
	}
}

// dropTenantIfUnused forgets ts when it has neither a weight nor jobs; s.mu must be held.
func (s *Store) dropTenantIfUnused(tenant string, ts *tenantStat) {
	if ts.weight != 0 {
		return
	}
	for _, n := range ts.counts {
		if n != 0 {
			return
		}
	}
	delete(s.tenants, tenant)
}

// tenantWeight returns tenant's turns per round; s.mu must be held.
func (s *Store) tenantWeight(tenant string) int {
	if ts := s.tenants[tenant]; ts != nil && ts.weight > 0 {
		return ts.weight
	}
	return store.DefaultTenantWeight
}

// tenantLimit returns the limit stored under tenant's limit key, or nil; s.mu must be held.
func (s *Store) tenantLimit(tenant string) *rateKey {
	if len(s.rates) == 0 {
		return nil
	}
	if rk := s.rates[store.TenantLimitKey(tenant)]; rk != nil && rk.set {
		return rk
	}
	return nil
}

// tenantBlocked reports whether tenant's limit lets it start no job at now: its rate window is
// spent, or it has MaxActive active jobs across queues; s.mu must be held.
func (s *Store) tenantBlocked(tenant string, now time.Time) bool {
	rk := s.tenantLimit(tenant)
	if rk == nil {
		return false
	}
	if rk.windowOpen(now) && rk.windowCount >= int64(rk.limit.Rate) {
		return true
	}
	if m := rk.limit.MaxActive; m > 0 {
		if ts := s.tenants[tenant]; ts != nil && ts.counts[stateIndex(store.StateActive)] >= int64(m) {
			return true
		}
	}
	return false
}

// SetTenantWeight stores tenant's weight and announces the queues where it has available jobs.
func (s *Store) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if tenant == "" || weight < 1 || weight > store.MaxTenantWeight {
		return fmt.Errorf("memory: set tenant weight %q to %d (want a tenant and 1 to %d): %w",
			tenant, weight, store.MaxTenantWeight, store.ErrInvalidParams)
	}
	s.mu.Lock()
	if s.tenants == nil {
		s.tenants = make(map[string]*tenantStat)
	}
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantStat{}
		s.tenants[tenant] = ts
	}
	ts.weight, ts.updated = weight, time.Now()
	s.mu.Unlock()
	return nil
}

// DeleteTenantWeight forgets tenant's stored weight.
func (s *Store) DeleteTenantWeight(ctx context.Context, tenant string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tenants[tenant]
	if ts == nil || ts.weight == 0 {
		return fmt.Errorf("memory: tenant %q has no stored weight: %w", tenant, store.ErrNotFound)
	}
	ts.weight, ts.updated = 0, time.Time{}
	s.dropTenantIfUnused(tenant, ts)
	return nil
}

// info reports ts as a TenantInfo.
func (ts *tenantStat) info(tenant string) *store.TenantInfo {
	out := &store.TenantInfo{Tenant: tenant, Weight: store.DefaultTenantWeight, Counts: map[store.State]int64{},
		Configured: ts.weight > 0, UpdatedAt: ts.updated}
	if ts.weight > 0 {
		out.Weight = ts.weight
	}
	for _, st := range store.AllStates {
		if n := ts.counts[stateIndex(st)]; n != 0 {
			out.Counts[st] = n
		}
	}
	return out
}

// GetTenant returns tenant's weight and job counts.
func (s *Store) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.tenants[tenant]
	if ts == nil {
		return nil, fmt.Errorf("memory: tenant %q: %w", tenant, store.ErrNotFound)
	}
	return ts.info(tenant), nil
}

// ListTenants returns every tenant with a stored weight or jobs, in tenant order.
func (s *Store) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*store.TenantInfo, 0, len(s.tenants))
	for name, ts := range s.tenants {
		out = append(out, ts.info(name))
	}
	slices.SortFunc(out, func(a, b *store.TenantInfo) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}

// idList is one tenant's job ids in ascending order, as Store.ids is every job's: deleted ids stay
// (skipped by ListJobs) until they outnumber the live ones.
type idList struct {
	ids  []string
	live int
}

// addTenantID records the new job id of tenant; s.mu must be held.
func (s *Store) addTenantID(tenant, id string) {
	if s.tenantIDs == nil {
		s.tenantIDs = make(map[string]*idList)
	}
	l := s.tenantIDs[tenant]
	if l == nil {
		l = &idList{}
		s.tenantIDs[tenant] = l
	}
	l.live++
	if n := len(l.ids); n == 0 || l.ids[n-1] < id {
		l.ids = append(l.ids, id) // ids made by one process increase: the usual case
		return
	}
	if i, found := slices.BinarySearch(l.ids, id); !found {
		l.ids = slices.Insert(l.ids, i, id)
	}
}

// forgetTenantID counts one of tenant's jobs deleted (s.jobs no longer holds it) and compacts the
// tenant's ids when the deleted ones outnumber the live; s.mu must be held.
func (s *Store) forgetTenantID(tenant string) {
	l := s.tenantIDs[tenant]
	if l == nil {
		return
	}
	l.live--
	if l.live <= 0 {
		delete(s.tenantIDs, tenant)
		return
	}
	if dead := len(l.ids) - l.live; dead > 64 && dead > l.live {
		live := l.ids[:0]
		for _, id := range l.ids {
			if j := s.jobs[id]; j != nil && j.Tenant == tenant {
				live = append(live, id)
			}
		}
		clear(l.ids[len(live):])
		l.ids = live
	}
}

// freesLimit reports whether j, leaving active, frees room under a limit a claim may be waiting
// for: its rate key's, or its tenant's when one is stored. Its queue is then announced, as when a
// job is inserted; s.mu must be held.
func (s *Store) freesLimit(j *job) bool {
	return j.RateKey != "" || (j.Tenant != "" && s.tenantLimit(j.Tenant) != nil)
}

// tenantWindowDue returns the earliest end of the open, exhausted rate window of a tenant with
// available jobs in q, and false if there is none: NextDue reports it, so that a producer the window
// stopped claims again when it ends rather than at its poll; s.mu must be held.
func (s *Store) tenantWindowDue(q *queue, now time.Time) (time.Time, bool) {
	if len(s.rates) == 0 || q.fair == nil || q.fair.linked == 0 {
		return time.Time{}, false
	}
	var first time.Time
	for name, n := range q.fair.byName {
		if !n.linked {
			continue
		}
		rk := s.tenantLimit(name)
		if rk == nil {
			continue
		}
		if blocked, until := rk.blocked(now); blocked && !until.IsZero() && (first.IsZero() || until.Before(first)) {
			first = until
		}
	}
	return first, !first.IsZero()
}
