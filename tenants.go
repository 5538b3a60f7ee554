package pronto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Tenants (docs/fair-scheduling.md, ojs-multi-tenancy.md). A job's tenant (InsertOpts.Tenant) is its
// fairness key: claims take a queue's jobs in turns across its tenants. Per tenant:
//
//   - a weight (TenantSetWeight): its turns per round, 1 by default;
//   - a limit (TenantSetLimit): the rate-limit machinery's RateLimit, stored under the rate key
//     TenantLimitKey(tenant), bounding the tenant's active jobs across every queue (MaxActive) and
//     its starts per window (Rate per Period); a tenant at its limit is passed over, its jobs wait;
//   - a priority boost (TenantSetPriorityBoost, tenantboost.go): added to the priority of its jobs
//     as they are inserted;
//   - its jobs per state across queues (TenantGet, TenantList);
//   - an automatic throttle, while noisy-neighbour checks (Config.NoisyNeighbors, tenantthrottle.go)
//     hold its weight or concurrency lowered.

// DefaultTenantWeight is the weight of a tenant without a stored one: one turn per round.
const DefaultTenantWeight = store.DefaultTenantWeight

// MaxTenantWeight bounds a tenant's weight.
const MaxTenantWeight = store.MaxTenantWeight

// TenantLimitKey returns the rate key under which tenant's limit is stored (RateLimitGet and
// RateLimitList show it there too).
func TenantLimitKey(tenant string) string { return store.TenantLimitKey(tenant) }

// TenantInfo is what the store knows of one tenant.
type TenantInfo struct {
	// Tenant is the tenant's id.
	Tenant string
	// Weight is its turns per round: the stored weight, else DefaultTenantWeight.
	Weight int
	// WeightSet reports whether a weight is stored.
	WeightSet bool
	// Counts holds the tenant's jobs per state, across queues (states without jobs are absent).
	Counts map[State]int64
	// Limit is the tenant's limit with its current window, or nil when none is stored. Its Active
	// and Waiting count jobs whose RateKey is TenantLimitKey(tenant); the tenant's own active jobs,
	// which MaxActive bounds, are Counts[StateActive].
	Limit *RateLimitInfo
	// EnqueueLimits are the tenant's enqueue-time limits (TenantSetEnqueueLimits), or nil when none
	// are stored.
	EnqueueLimits *TenantEnqueueLimits
	// PriorityBoost is the tenant's priority boost (TenantSetPriorityBoost), 0 when none is stored.
	PriorityBoost int
	// Throttle is the tenant's automatic throttle in force (Config.NoisyNeighbors), or nil. While it
	// holds, Weight is its EffectiveWeight.
	Throttle *TenantThrottle
}

// tenants returns the client's store as a store.TenantStore, or an ErrUnsupported error.
func (c *Client) tenants() (store.TenantStore, error) {
	ts, ok := c.store.(store.TenantStore)
	if !ok {
		return nil, fmt.Errorf("pronto: %T keeps no tenant weights or stats (store.TenantStore): %w", c.store, ErrUnsupported)
	}
	return ts, nil
}

func validTenantArg(tenant string) error {
	if !ValidTenant(tenant) {
		return invalidf("tenant %q: must be 1 to 255 printable ASCII characters without spaces", tenant)
	}
	return nil
}

// TenantSetWeight stores tenant's weight: from the next claim on, in every client, the tenant takes
// up to weight jobs per turn of a queue's rotation (1 to MaxTenantWeight).
func (c *Client) TenantSetWeight(ctx context.Context, tenant string, weight int) error {
	if err := validTenantArg(tenant); err != nil {
		return err
	}
	if weight < 1 || weight > MaxTenantWeight {
		return invalidf("weight %d of tenant %q: must be 1 to %d", weight, tenant, MaxTenantWeight)
	}
	ts, err := c.tenants()
	if err != nil {
		return err
	}
	created := c.watchTenantCreated(ctx, tenant, "fairness_weight")
	if err := ts.SetTenantWeight(ctx, tenant, weight); err != nil {
		return wrapOp(fmt.Sprintf("set weight of tenant %q", tenant), err)
	}
	c.markThrottleOverridden(ctx, tenant, ThrottleWeightReduced)
	created()
	return nil
}

// TenantDeleteWeight forgets tenant's stored weight (it weighs DefaultTenantWeight again), or returns
// ErrNotFound.
func (c *Client) TenantDeleteWeight(ctx context.Context, tenant string) error {
	ts, err := c.tenants()
	if err != nil {
		return err
	}
	if err := ts.DeleteTenantWeight(ctx, tenant); err != nil {
		return wrapOp(fmt.Sprintf("delete weight of tenant %q", tenant), err)
	}
	c.markThrottleOverridden(ctx, tenant, ThrottleWeightReduced)
	return nil
}

// TenantSetLimit stores tenant's limit (replacing any): at most l.MaxActive of its jobs active at once
// across every queue, at most l.Rate of them started per l.Period. It is the RateLimit stored under
// TenantLimitKey(tenant), enforced by the fair claims; a tenant's jobs always wait for room (l.OnLimit
// must be empty or LimitWait). Jobs of the tenant that also carry a RateKey keep that key's limit
// instead.
func (c *Client) TenantSetLimit(ctx context.Context, tenant string, l RateLimit) error {
	if err := validTenantArg(tenant); err != nil {
		return err
	}
	if l.OnLimit != "" && l.OnLimit != LimitWait {
		return invalidf("limit of tenant %q: on_limit %q: a tenant's jobs always wait for room", tenant, l.OnLimit)
	}
	created := c.watchTenantCreated(ctx, tenant, "limits")
	if err := c.RateLimitSet(ctx, TenantLimitKey(tenant), l); err != nil {
		return err
	}
	c.markThrottleOverridden(ctx, tenant, ThrottleConcurrencyReduced)
	created()
	return nil
}

// watchTenantCreated returns the function to call once setting is stored for tenant: it emits
// EventTenantCreated when tenant had no configuration before (a weight, limit, enqueue limits or
// priority boost). The reads are made only when a subscription takes the event. Two processes
// configuring a new tenant at the same instant may both emit it.
func (c *Client) watchTenantCreated(ctx context.Context, tenant, setting string) func() {
	if !c.events.wants(EventTenantCreated) || c.tenantConfigured(ctx, tenant) {
		return func() {}
	}
	return func() {
		c.events.emit(&Event{Kind: EventTenantCreated, Tenant: &TenantEvent{Tenant: tenant, Setting: setting}, At: time.Now()})
	}
}

// tenantConfigured reports whether tenant has a weight (other than one a throttle stored), a limit,
// enqueue limits or a priority boost. A failed read counts as configured: no event rather than a
// wrong one.
func (c *Client) tenantConfigured(ctx context.Context, tenant string) bool {
	ts, err := c.tenants()
	if err != nil {
		return true
	}
	ths, err := c.TenantThrottles(ctx)
	if err != nil {
		return true
	}
	th, throttled := ths[tenant]
	si, err := ts.GetTenant(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return true
	case si.Configured && (!throttled || th.Action != ThrottleWeightReduced || th.OriginalWeightSet):
		return true // a weight, not only one a throttle stored
	}
	_, err = c.store.GetRateLimit(ctx, TenantLimitKey(tenant))
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUnsupported):
	case err != nil:
		return true
	case !throttled || th.Action != ThrottleConcurrencyReduced || th.OriginalLimit != nil:
		return true // a limit, not only one a throttle stored
	}
	els, err := c.TenantEnqueueLimits(ctx)
	if err != nil {
		return true
	}
	boosts, err := c.TenantPriorityBoosts(ctx)
	if err != nil {
		return true
	}
	_, hasEL := els[tenant]
	_, hasBoost := boosts[tenant]
	return hasEL || hasBoost
}

// TenantDeleteLimit removes tenant's limit, or returns ErrNotFound.
func (c *Client) TenantDeleteLimit(ctx context.Context, tenant string) error {
	if err := c.RateLimitDelete(ctx, TenantLimitKey(tenant)); err != nil {
		return err
	}
	c.markThrottleOverridden(ctx, tenant, ThrottleConcurrencyReduced)
	return nil
}

// tenantInfo converts si and attaches limit.
func tenantInfo(si *store.TenantInfo, limit *RateLimitInfo) *TenantInfo {
	out := &TenantInfo{Tenant: si.Tenant, Weight: si.Weight, WeightSet: si.Configured, Counts: si.Counts, Limit: limit}
	if out.Counts == nil {
		out.Counts = map[State]int64{}
	}
	return out
}

// TenantGet returns what the store knows of tenant: its weight, its jobs per state across queues,
// its limit, its enqueue limits and its priority boost. ErrNotFound when it has none of them and no jobs.
func (c *Client) TenantGet(ctx context.Context, tenant string) (*TenantInfo, error) {
	ts, err := c.tenants()
	if err != nil {
		return nil, err
	}
	si, err := ts.GetTenant(ctx, tenant)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, wrapOp(fmt.Sprintf("tenant %q", tenant), err)
	}
	limit, err := c.store.GetRateLimit(ctx, TenantLimitKey(tenant))
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUnsupported) {
		return nil, wrapOp(fmt.Sprintf("limit of tenant %q", tenant), err)
	}
	els, err := c.TenantEnqueueLimits(ctx)
	if err != nil {
		return nil, err
	}
	var out *TenantInfo
	switch {
	case si != nil:
		out = tenantInfo(si, limit)
	case limit != nil:
		out = tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, limit)
	}
	if el, ok := els[tenant]; ok {
		if out == nil {
			out = tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, nil)
		}
		out.EnqueueLimits = &el
	}
	boosts, err := c.TenantPriorityBoosts(ctx)
	if err != nil {
		return nil, err
	}
	if boost, ok := boosts[tenant]; ok {
		if out == nil {
			out = tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, nil)
		}
		out.PriorityBoost = boost
	}
	if out != nil {
		ths, err := c.TenantThrottles(ctx)
		if err != nil {
			return nil, err
		}
		if th, ok := ths[tenant]; ok {
			out.Throttle = &th
		}
		return out, nil
	}
	return nil, wrapOp(fmt.Sprintf("tenant %q", tenant), fmt.Errorf("no weight, limit, priority boost or jobs: %w", store.ErrNotFound))
}

// TenantList returns every tenant with a stored weight, a limit, enqueue limits, a priority boost or
// jobs, in tenant order. It counts
// every tenant's jobs: meant for operators and dashboards.
func (c *Client) TenantList(ctx context.Context) ([]*TenantInfo, error) {
	ts, err := c.tenants()
	if err != nil {
		return nil, err
	}
	sis, err := ts.ListTenants(ctx)
	if err != nil {
		return nil, wrapOp("list tenants", err)
	}
	limits := map[string]*RateLimitInfo{}
	infos, err := c.store.ListRateLimits(ctx)
	if err != nil && !errors.Is(err, store.ErrUnsupported) {
		return nil, wrapOp("list tenant limits", err)
	}
	for _, l := range infos {
		if tenant, ok := strings.CutPrefix(l.Key, TenantLimitKey("")); ok && tenant != "" {
			limits[tenant] = l
		}
	}
	out := make([]*TenantInfo, 0, len(sis)+len(limits))
	for _, si := range sis {
		out = append(out, tenantInfo(si, limits[si.Tenant]))
		delete(limits, si.Tenant)
	}
	for tenant, l := range limits {
		out = append(out, tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, l))
	}
	els, err := c.TenantEnqueueLimits(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range out {
		if el, ok := els[t.Tenant]; ok {
			t.EnqueueLimits = &el
			delete(els, t.Tenant)
		}
	}
	for tenant, el := range els {
		t := tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, nil)
		t.EnqueueLimits = &el
		out = append(out, t)
	}
	boosts, err := c.TenantPriorityBoosts(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range out {
		if boost, ok := boosts[t.Tenant]; ok {
			t.PriorityBoost = boost
			delete(boosts, t.Tenant)
		}
	}
	for tenant, boost := range boosts {
		t := tenantInfo(&store.TenantInfo{Tenant: tenant, Weight: DefaultTenantWeight}, nil)
		t.PriorityBoost = boost
		out = append(out, t)
	}
	ths, err := c.TenantThrottles(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range out {
		if th, ok := ths[t.Tenant]; ok {
			t.Throttle = &th
		}
	}
	slices.SortFunc(out, func(a, b *TenantInfo) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}
