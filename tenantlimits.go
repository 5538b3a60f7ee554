package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Enqueue-time tenant limits (ojs-multi-tenancy.md §8.1, §8.2, MT-004). Beside its claim-time limit
// (TenantSetLimit), a tenant may have enqueue limits: at most MaxQueueDepth of its jobs waiting
// (available, scheduled, retryable or pending, across queues), at most MaxScheduled of them scheduled
// for later, at most EnqueueRate inserts per EnqueuePeriod. An insert beyond one fails with a
// *TenantLimitError (errors.Is(err, ErrTenantLimit)); a batch is refused whole.
//
// Like a queue's backpressure bound, checking costs no round trip per insert: each client reads the
// limits (one setting, tenantEnqueueLimitsKey, for every tenant) at most every boundsEvery, and a
// limited tenant's counts at most every depthEvery (one TenantStore.GetTenant), adding what it
// inserted since. Inserts of tenants without enqueue limits read nothing. The price is precision, as
// for backpressure: jobs started since the last read still count (the limit is met early, never late,
// by one client), and what other clients inserted meanwhile is not seen yet. The enqueue rate is
// counted by each client on its own inserts (a fixed window per tenant): with several clients (several
// `pronto serve` processes) a tenant may insert up to the rate per client.

// ErrTenantLimit is matched (errors.Is) by the error of an insert refused by a tenant's enqueue limit.
var ErrTenantLimit = errors.New("tenant limit exceeded")

// Names of the enqueue limits in a TenantLimitError (the spec's field names).
const (
	TenantLimitQueueDepth  = "max_queue_depth"
	TenantLimitScheduled   = "max_scheduled"
	TenantLimitEnqueueRate = "max_enqueue_rate"
)

// TenantLimitError is the error of an insert refused because a tenant reached an enqueue limit.
type TenantLimitError struct {
	// Tenant is the limited tenant.
	Tenant string
	// Limit names the limit reached: TenantLimitQueueDepth, TenantLimitScheduled or
	// TenantLimitEnqueueRate.
	Limit string
	// Current is the tenant's count as the client counted it (waiting jobs, scheduled jobs, or inserts
	// in the current rate window).
	Current int64
	// Maximum is the limit.
	Maximum int64
	// Adding is how many jobs of the refused insert counted against the limit.
	Adding int
	// RetryAfter is when an insert may succeed at the earliest: the end of the rate window, or the
	// next recount of the tenant's jobs.
	RetryAfter time.Duration
}

func (e *TenantLimitError) Error() string {
	return fmt.Sprintf("tenant %q has exceeded %s (%d): %d counted, adding %d; retry in %s",
		e.Tenant, e.Limit, e.Maximum, e.Current, e.Adding, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrTenantLimit) hold.
func (e *TenantLimitError) Is(target error) bool { return target == ErrTenantLimit }

// TenantEnqueueLimits are a tenant's enqueue-time limits; a zero field sets no bound.
type TenantEnqueueLimits struct {
	// MaxQueueDepth bounds the tenant's waiting jobs (available, scheduled, retryable, pending) across
	// every queue.
	MaxQueueDepth int64 `json:"max_queue_depth,omitempty"`
	// MaxScheduled bounds the tenant's scheduled jobs (due later) across every queue.
	MaxScheduled int64 `json:"max_scheduled,omitempty"`
	// EnqueueRate bounds the tenant's inserts per EnqueuePeriod, counted by each client.
	EnqueueRate int64 `json:"enqueue_rate,omitempty"`
	// EnqueuePeriod is EnqueueRate's window; set with EnqueueRate.
	EnqueuePeriod time.Duration `json:"enqueue_period,omitempty"`
}

// IsZero reports whether l sets no bound.
func (l TenantEnqueueLimits) IsZero() bool {
	return l.MaxQueueDepth == 0 && l.MaxScheduled == 0 && l.EnqueueRate == 0
}

func (l TenantEnqueueLimits) validate(tenant string) error {
	switch {
	case l.MaxQueueDepth < 0 || l.MaxScheduled < 0 || l.EnqueueRate < 0:
		return invalidf("enqueue limits of tenant %q: bounds must be 0 (none) or more", tenant)
	case l.EnqueueRate > 0 && l.EnqueuePeriod <= 0:
		return invalidf("enqueue limits of tenant %q: an enqueue rate needs a positive period", tenant)
	case l.EnqueueRate == 0 && l.EnqueuePeriod != 0:
		return invalidf("enqueue limits of tenant %q: an enqueue period without a rate", tenant)
	}
	return nil
}

// tenantEnqueueLimitsKey is the setting (store.SettingStore) holding every tenant's enqueue limits, a
// JSON object keyed by tenant.
const tenantEnqueueLimitsKey = "tenant_enqueue_limits"

// tenantGate is a client's view of the tenants' enqueue limits and of the limited tenants' counts.
type tenantGate struct {
	mu       sync.Mutex
	limitsAt time.Time
	limits   map[string]TenantEnqueueLimits
	tenants  map[string]*tenantCount // made on first use
	// setMu serializes this client's read-modify-write of the limits setting.
	setMu sync.Mutex
	// boosts are the tenants' priority boosts (tenantboost.go), read the same way.
	boosts tenantBoosts
}

type tenantCount struct {
	waiting, scheduled int64
	at                 time.Time
	windowStart        time.Time
	windowCount        int64
}

// waitingStates are the states MaxQueueDepth counts.
var waitingStates = []State{StateAvailable, StateScheduled, StateRetryable, StatePending}

func (c *Client) settings() (store.SettingStore, bool) {
	ss, ok := c.store.(store.SettingStore)
	return ss, ok
}

func readTenantEnqueueLimits(ctx context.Context, ss store.SettingStore) (map[string]TenantEnqueueLimits, error) {
	return readSettingMap[TenantEnqueueLimits](ctx, ss, tenantEnqueueLimitsKey)
}

// tenantAdmission is the set of limited tenants whose counts checkTenantLimits raised for an
// insert: those of its jobs the store did not insert are taken back out (refund).
type tenantAdmission map[string]bool

// refund takes the jobs of ps, which the store did not insert (the insert failed, or a unique job
// met its key's holder), back out of the counts that checkTenantLimits raised for them: a refused
// insert uses up none of a tenant's enqueue rate.
func (c *Client) refund(adm tenantAdmission, ps []*store.InsertParams) {
	if len(adm) == 0 || len(ps) == 0 {
		return
	}
	g := &c.tg
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range ps {
		tc := g.tenants[p.Tenant]
		if !adm[p.Tenant] || tc == nil {
			continue
		}
		tc.waiting = max(tc.waiting-1, 0)
		if p.State == StateScheduled {
			tc.scheduled = max(tc.scheduled-1, 0)
		}
		tc.windowCount = max(tc.windowCount-1, 0)
	}
}

// refundUnstored is refund of the jobs of ps that an insert returning rows (in ps's order) and err
// did not store.
func (c *Client) refundUnstored(adm tenantAdmission, ps []*store.InsertParams, rows []*JobRow, err error) {
	if len(adm) == 0 {
		return
	}
	if err != nil || len(rows) != len(ps) {
		c.refund(adm, ps)
		return
	}
	var unstored []*store.InsertParams
	for i, r := range rows {
		if r != nil && r.Duplicate {
			unstored = append(unstored, ps[i])
		}
	}
	c.refund(adm, unstored)
}

// refundFastDuplicates takes dups unique duplicates of an InsertFast of ps, which does not say which
// jobs they were, back out of the tenants' counts: exactly when the jobs that could be duplicates
// (those with a unique key) are all one tenant's. Otherwise the tenants' depths are read again at
// their next insert, and their enqueue-rate windows may count the duplicates until they roll over.
func (c *Client) refundFastDuplicates(adm tenantAdmission, ps []*store.InsertParams, dups int) {
	if len(adm) == 0 {
		return
	}
	var keyed []*store.InsertParams
	for _, p := range ps {
		if p.UniqueKey != "" {
			keyed = append(keyed, p)
		}
	}
	if len(keyed) >= dups && !slices.ContainsFunc(keyed, func(p *store.InsertParams) bool { return p.Tenant != keyed[0].Tenant }) {
		c.refund(adm, keyed[:dups])
		return
	}
	g := &c.tg
	g.mu.Lock()
	defer g.mu.Unlock()
	for t := range adm {
		if tc := g.tenants[t]; tc != nil {
			tc.at = time.Time{}
		}
	}
}

// checkTenantLimits refuses ps when one of its tenants would go beyond an enqueue limit, and
// otherwise counts ps into the tenants' counts, returning the tenants it counted (see refund).
func (c *Client) checkTenantLimits(ctx context.Context, ps []*store.InsertParams) (tenantAdmission, error) {
	ss, ok := c.settings()
	if !ok {
		return nil, nil
	}
	ts, ok := c.store.(store.TenantStore)
	if !ok {
		return nil, nil
	}
	g := &c.tg
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if now.Sub(g.limitsAt) >= boundsEvery {
		limits, err := readTenantEnqueueLimits(ctx, ss)
		if err != nil {
			// Fail open, as backpressure does: keep the last limits known.
			c.cfg.Logger.Warn("pronto: reading tenant enqueue limits failed; keeping the last known", "error", err)
		} else {
			g.limits = limits
		}
		g.limitsAt = now
	}
	if len(g.limits) == 0 {
		return nil, nil
	}
	type adding struct{ all, scheduled int }
	var add map[string]*adding
	var order []string
	for _, p := range ps {
		if p.Tenant == "" {
			continue
		}
		if _, limited := g.limits[p.Tenant]; !limited {
			continue
		}
		if add == nil {
			add = map[string]*adding{}
		}
		a := add[p.Tenant]
		if a == nil {
			a = &adding{}
			add[p.Tenant] = a
			order = append(order, p.Tenant)
		}
		a.all++
		if p.State == StateScheduled {
			a.scheduled++
		}
	}
	if add == nil {
		return nil, nil
	}
	if g.tenants == nil {
		g.tenants = map[string]*tenantCount{}
	}
	slices.Sort(order)
	for _, t := range order {
		l, a := g.limits[t], add[t]
		tc := g.tenants[t]
		if tc == nil {
			tc = &tenantCount{}
			g.tenants[t] = tc
		}
		if (l.MaxQueueDepth > 0 || l.MaxScheduled > 0) && now.Sub(tc.at) >= depthEvery {
			info, err := ts.GetTenant(ctx, t)
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUnsupported):
				// No jobs; or a store that cannot count them (TenantSetEnqueueLimits refuses depth
				// limits there): nothing counted.
				tc.waiting, tc.scheduled = 0, 0
			case err != nil:
				return nil, fmt.Errorf("counting the jobs of tenant %q for its enqueue limits: %w", t, err)
			default:
				tc.waiting = 0
				for _, st := range waitingStates {
					tc.waiting += info.Counts[st]
				}
				tc.scheduled = info.Counts[StateScheduled]
			}
			tc.at = now
		}
		retry := depthEvery - now.Sub(tc.at)
		if l.MaxQueueDepth > 0 && tc.waiting+int64(a.all) > l.MaxQueueDepth {
			return nil, &TenantLimitError{Tenant: t, Limit: TenantLimitQueueDepth, Current: tc.waiting, Maximum: l.MaxQueueDepth, Adding: a.all, RetryAfter: retry}
		}
		if l.MaxScheduled > 0 && a.scheduled > 0 && tc.scheduled+int64(a.scheduled) > l.MaxScheduled {
			return nil, &TenantLimitError{Tenant: t, Limit: TenantLimitScheduled, Current: tc.scheduled, Maximum: l.MaxScheduled, Adding: a.scheduled, RetryAfter: retry}
		}
		if l.EnqueueRate > 0 {
			if now.Sub(tc.windowStart) >= l.EnqueuePeriod {
				tc.windowStart, tc.windowCount = now, 0
			}
			if tc.windowCount+int64(a.all) > l.EnqueueRate {
				return nil, &TenantLimitError{Tenant: t, Limit: TenantLimitEnqueueRate, Current: tc.windowCount, Maximum: l.EnqueueRate, Adding: a.all,
					RetryAfter: tc.windowStart.Add(l.EnqueuePeriod).Sub(now)}
			}
		}
	}
	adm := make(tenantAdmission, len(order))
	for _, t := range order {
		tc, a := g.tenants[t], add[t]
		tc.waiting += int64(a.all)
		tc.scheduled += int64(a.scheduled)
		tc.windowCount += int64(a.all)
		adm[t] = true
	}
	return adm, nil
}

// TenantSetEnqueueLimits stores tenant's enqueue limits, replacing any; a zero l removes them. Every
// client applies them within about a second. The store must implement store.SettingStore and
// store.TenantStore (all of pronto's stores do). Two processes changing enqueue limits at the same
// instant may lose one of the changes (the limits are one setting, written whole): TenantEnqueueLimits
// reads back what is stored.
func (c *Client) TenantSetEnqueueLimits(ctx context.Context, tenant string, l TenantEnqueueLimits) error {
	if err := validTenantArg(tenant); err != nil {
		return err
	}
	if err := l.validate(tenant); err != nil {
		return err
	}
	ss, ok := c.settings()
	if !ok {
		return fmt.Errorf("pronto: %T keeps no settings (store.SettingStore): %w", c.store, ErrUnsupported)
	}
	ts, err := c.tenants()
	if err != nil {
		return err
	}
	if l.MaxQueueDepth > 0 || l.MaxScheduled > 0 {
		// Depth limits count the tenant's jobs (a store may keep no tenant counts).
		if _, err := ts.GetTenant(ctx, tenant); errors.Is(err, store.ErrUnsupported) {
			return fmt.Errorf("pronto: enqueue limits of tenant %q: %T cannot count a tenant's jobs: %w", tenant, c.store, ErrUnsupported)
		}
	}
	created := func() {}
	if !l.IsZero() {
		created = c.watchTenantCreated(ctx, tenant, "enqueue_limits")
	}
	g := &c.tg
	g.setMu.Lock()
	defer g.setMu.Unlock()
	m, err := readTenantEnqueueLimits(ctx, ss)
	if err != nil {
		return wrapOp(fmt.Sprintf("enqueue limits of tenant %q", tenant), err)
	}
	if l.IsZero() {
		if _, had := m[tenant]; !had {
			return nil
		}
		delete(m, tenant)
	} else {
		m[tenant] = l
	}
	var raw json.RawMessage
	if len(m) > 0 {
		if raw, err = json.Marshal(m); err != nil {
			return err
		}
	}
	if err := ss.SetSetting(ctx, tenantEnqueueLimitsKey, raw); err != nil {
		return wrapOp(fmt.Sprintf("enqueue limits of tenant %q", tenant), err)
	}
	g.mu.Lock()
	g.limitsAt = time.Time{}
	g.mu.Unlock()
	created()
	return nil
}

// TenantEnqueueLimits returns every tenant's enqueue limits (see TenantSetEnqueueLimits); an empty map
// when the store keeps no settings.
func (c *Client) TenantEnqueueLimits(ctx context.Context) (map[string]TenantEnqueueLimits, error) {
	ss, ok := c.settings()
	if !ok {
		return map[string]TenantEnqueueLimits{}, nil
	}
	m, err := readTenantEnqueueLimits(ctx, ss)
	if err != nil {
		return nil, wrapOp("tenant enqueue limits", err)
	}
	return m, nil
}
