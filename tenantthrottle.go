package pronto

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/internal/maintenance"
	"github.com/pronto-jobs/pronto/store"
)

// Noisy-neighbour detection and automatic throttling (ojs-multi-tenancy.md §9.1, §9.2,
// docs/fair-scheduling.md). With Config.NoisyNeighbors set, the client that leads the cluster's
// maintenance reads every tenant's job counts (store.TenantStore.ListTenants) every Interval and
// judges each tenant against the others contending with it: a tenant is noisy when another tenant
// has jobs waiting behind it and one of the signals passes its threshold. With Throttle on, a noisy
// tenant's stored weight is lowered until Until: the claims read weights from the store already,
// so the throttle costs them nothing. The throttles are one setting (tenant_throttles,
// store.SettingStore), so every client and server sees them (TenantThrottles, TenantGet).
//
// The release rule: a throttle ends at its Until (the leader's next pass after it) or by
// TenantThrottleReset. It restores the weight the tenant had before, unless the weight was changed
// while the throttle held (TenantSetWeight or TenantDeleteWeight through any client, which marks the
// throttle overridden, or any other writer, seen as a stored weight that is no longer the throttle's
// effective weight): an operator's change is newer than the throttle's record and is kept.

// Reasons a tenant is found noisy (TenantThrottle.Reason, the spec's names).
const (
	NoisyQueueDepth  = "queue_depth_ratio_exceeded"
	NoisyActiveJobs  = "active_job_ratio_exceeded"
	NoisyEnqueueRate = "enqueue_rate_ratio_exceeded"
	NoisyErrorRate   = "error_rate_ratio_exceeded"
)

// Actions of a throttle (TenantThrottle.Action).
const (
	// ThrottleWeightReduced: the tenant's weight was lowered (a tenant of weight above 1).
	ThrottleWeightReduced = "weight_reduced"
	// ThrottleConcurrencyReduced: the tenant's limit got a lower MaxActive (max_concurrency), for a
	// tenant of weight 1, whose weight cannot go lower.
	ThrottleConcurrencyReduced = "concurrency_reduced"
)

// Causes of a throttle's release (TenantThrottleRelease.Cause).
const (
	ThrottleExpired = "expired" // its Until passed
	ThrottleReset   = "reset"   // TenantThrottleReset (DELETE /ojs/v1/admin/tenants/{id}/throttle)
)

// NoisyNeighborConfig configures noisy-neighbour detection and throttling (Config.NoisyNeighbors).
// A zero field takes the default in its comment; a negative ratio turns its signal off.
type NoisyNeighborConfig struct {
	// Interval is how often the leader checks (1 min; at least 100 ms).
	Interval time.Duration
	// Timeout bounds each check's read of the tenants' counts (10 s, and at most Interval): a
	// check that runs out is skipped and logged.
	Timeout time.Duration

	// QueueDepthRatio: noisy when the tenant's available jobs exceed this many times the median of
	// the other contending tenants' (10), and are at least MinQueueDepth (100).
	QueueDepthRatio float64
	MinQueueDepth   int64
	// ActiveShare: noisy when the tenant's active jobs exceed this share of all tenants' active jobs
	// (0.5), and are at least MinActive (10).
	ActiveShare float64
	MinActive   int64
	// EnqueueRateRatio: noisy when the tenant's jobs grew faster than this many times the average of
	// the others (5), and by at least MinEnqueueRate jobs a second (1). Measured between two checks
	// of the same leader as the growth of the tenant's job count (all states), so only when the
	// leader's retention cleanup deleted nothing between them.
	EnqueueRateRatio float64
	MinEnqueueRate   float64
	// ErrorRateRatio: noisy when the share of the tenant's finished jobs that were discarded exceeds
	// this many times the others' average (3), is at least MinErrorRate (0.1), and at least
	// MinFinished of its jobs finished (20). Measured like the enqueue rate, from the completed and
	// discarded counts.
	ErrorRateRatio float64
	MinErrorRate   float64
	MinFinished    int64

	// Throttle turns automatic throttling on: a noisy tenant's weight becomes
	// max(1, weight × WeightFactor) for ThrottleFor. Off: noisy tenants are only logged.
	Throttle bool
	// WeightFactor scales a throttled tenant's weight (0.2; above 0, below 1). A tenant of weight 1
	// cannot be lowered and is only logged.
	WeightFactor float64
	// ThrottleFor is how long a throttle lasts (5 min).
	ThrottleFor time.Duration
	// MaxThrottled bounds how many tenants are throttled at once (10), so that a check gone wrong
	// cannot throttle every tenant.
	MaxThrottled int
}

func (n NoisyNeighborConfig) withDefaults() (NoisyNeighborConfig, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if n.Interval == 0 {
		n.Interval = time.Minute
	}
	if n.Timeout == 0 {
		n.Timeout = 10 * time.Second
	}
	n.Timeout = min(n.Timeout, n.Interval)
	def(&n.QueueDepthRatio, 10)
	defInt(&n.MinQueueDepth, 100)
	def(&n.ActiveShare, 0.5)
	defInt(&n.MinActive, 10)
	def(&n.EnqueueRateRatio, 5)
	def(&n.MinEnqueueRate, 1)
	def(&n.ErrorRateRatio, 3)
	def(&n.MinErrorRate, 0.1)
	defInt(&n.MinFinished, 20)
	def(&n.WeightFactor, 0.2)
	if n.ThrottleFor == 0 {
		n.ThrottleFor = 5 * time.Minute
	}
	if n.MaxThrottled == 0 {
		n.MaxThrottled = 10
	}
	switch {
	case n.Interval < 100*time.Millisecond:
		return n, invalidf("config: NoisyNeighbors.Interval %s: must be at least 100ms", n.Interval)
	case n.Timeout < 0:
		return n, invalidf("config: NoisyNeighbors.Timeout %s: must not be negative", n.Timeout)
	case n.ActiveShare >= 1:
		return n, invalidf("config: NoisyNeighbors.ActiveShare %g: must be below 1 (negative: off)", n.ActiveShare)
	case n.MinQueueDepth < 0 || n.MinActive < 0 || n.MinEnqueueRate < 0 || n.MinErrorRate < 0 || n.MinFinished < 0:
		return n, invalidf("config: NoisyNeighbors: minimums must not be negative")
	case n.WeightFactor <= 0 || n.WeightFactor >= 1:
		return n, invalidf("config: NoisyNeighbors.WeightFactor %g: must be above 0 and below 1", n.WeightFactor)
	case n.ThrottleFor < 0:
		return n, invalidf("config: NoisyNeighbors.ThrottleFor %s: must be positive", n.ThrottleFor)
	case n.MaxThrottled < 0:
		return n, invalidf("config: NoisyNeighbors.MaxThrottled %d: must be positive", n.MaxThrottled)
	}
	return n, nil
}

// TenantThrottle is a tenant's automatic throttle, as stored.
type TenantThrottle struct {
	// Tenant is the throttled tenant.
	Tenant string `json:"tenant_id"`
	// Reason is the signal that found it noisy (NoisyQueueDepth, ...).
	Reason string `json:"reason"`
	// Value is the tenant's measure of that signal and Threshold what it exceeded (for example its
	// available jobs and 10 × the median).
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Action is ThrottleWeightReduced or ThrottleConcurrencyReduced.
	Action string `json:"action"`
	// OriginalWeight is the tenant's weight before (OriginalWeightSet: it was stored, rather than
	// DefaultTenantWeight by default).
	OriginalWeight    int  `json:"original_weight"`
	OriginalWeightSet bool `json:"original_weight_set"`
	// EffectiveWeight is the weight the throttle stored (OriginalWeight when it lowered the
	// concurrency instead).
	EffectiveWeight int `json:"effective_weight"`
	// OriginalLimit is the tenant's limit before a ThrottleConcurrencyReduced throttle (nil: none),
	// and EffectiveLimit the one it stored: OriginalLimit with a lower MaxActive.
	OriginalLimit  *RateLimit `json:"original_limit,omitempty"`
	EffectiveLimit *RateLimit `json:"effective_limit,omitempty"`
	// Since and Until bound it.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Overridden reports that what the throttle lowered (the weight, or the limit) was changed
	// through the client API while the throttle held: its release then keeps the change.
	Overridden bool `json:"overridden,omitempty"`
}

// TenantThrottleRelease reports the end of a throttle.
type TenantThrottleRelease struct {
	TenantThrottle
	// Cause is ThrottleExpired or ThrottleReset.
	Cause string
	// Weight is the tenant's weight after the release.
	Weight int
	// Limit is the tenant's limit after the release of a ThrottleConcurrencyReduced throttle (nil:
	// none).
	Limit *RateLimit
	// Kept reports that what the throttle lowered was changed while it held and was kept, instead
	// of the original being restored.
	Kept bool
}

// TenantEvent is the payload of the tenant events (Event.Tenant).
type TenantEvent struct {
	// Tenant is the tenant's id.
	Tenant string
	// Throttle is the throttle applied, for EventTenantThrottled.
	Throttle *TenantThrottle
	// Release is the throttle released, for EventTenantThrottleReleased.
	Release *TenantThrottleRelease
	// Setting names what configured the tenant first, for EventTenantCreated: "fairness_weight",
	// "limits", "enqueue_limits" or "priority_boost".
	Setting string
}

// tenantThrottlesKey is the setting holding every tenant's throttle, a JSON object keyed by tenant.
const tenantThrottlesKey = "tenant_throttles"

// noisyDetector is the leader's state between checks, and the client's lock on the throttles'
// setting.
type noisyDetector struct {
	// mu serializes this client's checks and resets (and guards the fields below).
	mu sync.Mutex
	// setMu serializes this client's read-modify-writes of the throttles setting; held briefly,
	// so that a weight change (markThrottleOverridden) never waits for a check's count.
	setMu   sync.Mutex
	prev    map[string]tenantSample
	prevAt  time.Time
	prevDel int64
	// noisy are the tenants found noisy by the last check, with their reason: each is logged when
	// it becomes noisy, not at every check.
	noisy map[string]string
	// now is the clock (tests replace it).
	now func() time.Time
	// unsupported logs once that the store cannot count tenants' jobs.
	unsupported sync.Once
}

func (d *noisyDetector) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// tenantSample is what a check reads of one tenant.
type tenantSample struct {
	available, active, total, completed, discarded int64
	weight                                         int
	weightSet                                      bool
}

// noisyFinding is a tenant found noisy.
type noisyFinding struct {
	tenant           string
	reason           string
	value, threshold float64
}

// noisyCheck is what one check did (tests).
type noisyCheck struct {
	noisy     map[string]string // tenant: reason
	throttled []string
	released  []string
}

func readTenantThrottles(ctx context.Context, ss store.SettingStore) (map[string]TenantThrottle, error) {
	return readSettingMap[TenantThrottle](ctx, ss, tenantThrottlesKey)
}

// updateThrottles applies change to the throttles as stored, atomically (updateSettingMap): a change
// another process makes meanwhile (a reset through another server) is kept, not written over.
func (c *Client) updateThrottles(ctx context.Context, ss store.SettingStore, change func(m map[string]TenantThrottle)) error {
	c.noisy.setMu.Lock()
	defer c.noisy.setMu.Unlock()
	return updateSettingMap(ctx, ss, tenantThrottlesKey, func(m map[string]TenantThrottle) error {
		change(m)
		return nil
	})
}

// TenantThrottles returns every tenant's throttle in force (an empty map when the store keeps no
// settings). A throttle past its Until is listed until the leader's next check releases it.
func (c *Client) TenantThrottles(ctx context.Context) (map[string]TenantThrottle, error) {
	ss, ok := c.settings()
	if !ok {
		return map[string]TenantThrottle{}, nil
	}
	m, err := readTenantThrottles(ctx, ss)
	if err != nil {
		return nil, wrapOp("tenant throttles", err)
	}
	return m, nil
}

// TenantThrottleReset ends tenant's throttle now and restores its weight (see the release rule in
// docs/fair-scheduling.md), emitting EventTenantThrottleReleased; ErrNotFound when it has none.
func (c *Client) TenantThrottleReset(ctx context.Context, tenant string) (*TenantThrottleRelease, error) {
	if err := validTenantArg(tenant); err != nil {
		return nil, err
	}
	ss, ok := c.settings()
	if !ok {
		return nil, fmt.Errorf("pronto: %T keeps no settings (store.SettingStore): %w", c.store, ErrUnsupported)
	}
	d := &c.noisy
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := readTenantThrottles(ctx, ss)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("throttle of tenant %q", tenant), err)
	}
	th, ok := m[tenant]
	if !ok {
		return nil, wrapOp(fmt.Sprintf("throttle of tenant %q", tenant), fmt.Errorf("none in force: %w", store.ErrNotFound))
	}
	rel, err := c.releaseThrottle(ctx, ss, th, ThrottleReset)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("release the throttle of tenant %q", tenant), err)
	}
	return rel, nil
}

// releaseThrottle restores what th lowered (unless it was changed meanwhile), then drops th from the
// setting, in that order: a release cut short is finished by the next one, which finds the value no
// longer the throttle's and keeps it. c.noisy.mu is held.
func (c *Client) releaseThrottle(ctx context.Context, ss store.SettingStore, th TenantThrottle, cause string) (*TenantThrottleRelease, error) {
	ts, err := c.tenants()
	if err != nil {
		return nil, err
	}
	rel := &TenantThrottleRelease{TenantThrottle: th, Cause: cause}
	cur, err := ts.GetTenant(ctx, th.Tenant)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	rel.Weight = DefaultTenantWeight
	if cur != nil {
		rel.Weight = cur.Weight
	}
	if th.Action == ThrottleConcurrencyReduced {
		if err := c.releaseLimit(ctx, rel); err != nil {
			return nil, err
		}
		return rel, c.dropThrottle(ctx, ss, rel)
	}
	stillOurs := !th.Overridden && cur != nil && cur.Configured && cur.Weight == th.EffectiveWeight
	switch {
	case !stillOurs:
		rel.Kept = true
	case th.OriginalWeightSet:
		if err := ts.SetTenantWeight(ctx, th.Tenant, th.OriginalWeight); err != nil {
			return nil, err
		}
		rel.Weight = th.OriginalWeight
	default:
		if err := ts.DeleteTenantWeight(ctx, th.Tenant); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		rel.Weight = DefaultTenantWeight
	}
	return rel, c.dropThrottle(ctx, ss, rel)
}

// releaseLimit restores the limit a ThrottleConcurrencyReduced throttle lowered, unless it was
// changed meanwhile (rel.Kept).
func (c *Client) releaseLimit(ctx context.Context, rel *TenantThrottleRelease) error {
	key := TenantLimitKey(rel.Tenant)
	info, err := c.store.GetRateLimit(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	var cur *RateLimit
	if info != nil {
		cur = &info.Limit
	}
	if rel.Overridden || cur == nil || rel.EffectiveLimit == nil || !sameBounds(*cur, *rel.EffectiveLimit) {
		rel.Kept, rel.Limit = true, cur
		return nil
	}
	if rel.OriginalLimit == nil {
		if err := c.store.DeleteRateLimit(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}
	if err := c.store.SetRateLimit(ctx, key, *rel.OriginalLimit); err != nil {
		return err
	}
	rel.Limit = rel.OriginalLimit
	return nil
}

// sameBounds reports whether a and b bound alike (OnLimit aside: a tenant's jobs always wait).
func sameBounds(a, b RateLimit) bool {
	return a.MaxActive == b.MaxActive && a.Rate == b.Rate && a.Period == b.Period
}

// dropThrottle removes rel's throttle from the setting and emits EventTenantThrottleReleased.
func (c *Client) dropThrottle(ctx context.Context, ss store.SettingStore, rel *TenantThrottleRelease) error {
	if err := c.updateThrottles(ctx, ss, func(m map[string]TenantThrottle) { delete(m, rel.Tenant) }); err != nil {
		return err
	}
	c.cfg.Logger.Info("pronto: tenant throttle released", "tenant", rel.Tenant, "cause", rel.Cause, "action", rel.Action, "weight", rel.Weight, "kept", rel.Kept)
	c.events.emit(&Event{Kind: EventTenantThrottleReleased, Tenant: &TenantEvent{Tenant: rel.Tenant, Release: rel}, At: c.noisy.clock()})
	return nil
}

// markThrottleOverridden records that what a throttle of action lowered (tenant's weight, or its
// limit) was changed while the throttle held, so that the release keeps the change. Best effort: a
// failure is logged (the release then compares what is stored with what the throttle stored).
func (c *Client) markThrottleOverridden(ctx context.Context, tenant, action string) {
	ss, ok := c.settings()
	if !ok {
		return
	}
	ths, err := readTenantThrottles(ctx, ss)
	if err == nil {
		if th, ok := ths[tenant]; !ok || th.Overridden || th.Action != action {
			return
		}
		err = c.updateThrottles(ctx, ss, func(m map[string]TenantThrottle) {
			if th, ok := m[tenant]; ok && th.Action == action {
				th.Overridden = true
				m[tenant] = th
			}
		})
	}
	if err != nil {
		c.cfg.Logger.Warn("pronto: recording a change made during a tenant's throttle failed", "tenant", tenant, "error", err)
	}
}

// throttleExpiryInterval is how often a leader without noisy-neighbour checks releases the tenant
// throttles past their end: a check of another client, or of this client's earlier configuration,
// left them, and without it a tenant would keep its lowered weight or limit for good.
const throttleExpiryInterval = 10 * time.Second

// maintenanceTasks returns the leader's periodic tasks: the noisy-neighbour check when
// Config.NoisyNeighbors is set, else the release of expired throttles.
func (c *Client) maintenanceTasks() []maintenance.Task {
	nn := c.cfg.NoisyNeighbors
	if nn == nil {
		ss, ok := c.settings()
		if !ok {
			return nil
		}
		every := throttleExpiryInterval
		if c.throttleExpiryEvery > 0 {
			every = c.throttleExpiryEvery
		}
		return []maintenance.Task{{Name: "tenant-throttle-expiry", Interval: every, Run: func(ctx context.Context) {
			d := &c.noisy
			d.mu.Lock()
			defer d.mu.Unlock()
			throttles, err := readTenantThrottles(ctx, ss)
			if err == nil {
				_, err = c.releaseExpiredThrottles(ctx, ss, throttles, d.clock())
			}
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("pronto: releasing expired tenant throttles failed", "error", err)
			}
		}}}
	}
	return []maintenance.Task{{Name: "noisy-neighbors", Interval: nn.Interval, Run: func(ctx context.Context) {
		_, err := c.checkNoisyNeighbors(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, ErrUnsupported):
			// A store without tenant counts: said once.
			c.noisy.unsupported.Do(func() { c.cfg.Logger.Warn("pronto: noisy-neighbour checks need tenant counts", "error", err) })
		default:
			c.cfg.Logger.Warn("pronto: noisy-neighbour check failed", "error", err)
		}
	}}}
}

// releaseExpiredThrottles releases the throttles of throttles past their Until at now, and returns
// their tenants; c.noisy.mu must be held.
func (c *Client) releaseExpiredThrottles(ctx context.Context, ss store.SettingStore, throttles map[string]TenantThrottle, now time.Time) ([]string, error) {
	var released []string
	for _, tenant := range slices.Sorted(mapKeys(throttles)) {
		th := throttles[tenant]
		if th.Until.After(now) {
			continue
		}
		if _, err := c.releaseThrottle(ctx, ss, th, ThrottleExpired); err != nil {
			return released, fmt.Errorf("release the throttle of tenant %q: %w", tenant, err)
		}
		released = append(released, tenant)
	}
	return released, nil
}

// maintainerNow returns the client's maintainer, nil before Start or without maintenance.
func (c *Client) maintainerNow() *maintenance.Maintainer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maintainer
}

// checkNoisyNeighbors runs one check: it releases the throttles past their Until, reads the
// tenants' counts, finds the noisy tenants and, with Throttle, throttles them.
func (c *Client) checkNoisyNeighbors(ctx context.Context) (*noisyCheck, error) {
	cfg := *c.cfg.NoisyNeighbors
	ts, err := c.tenants()
	if err != nil {
		return nil, err
	}
	ss, hasSettings := c.settings()
	d := &c.noisy
	d.mu.Lock()
	defer d.mu.Unlock()
	out := &noisyCheck{noisy: map[string]string{}}
	now := d.clock()
	var throttles map[string]TenantThrottle
	if hasSettings {
		if throttles, err = readTenantThrottles(ctx, ss); err != nil {
			return nil, fmt.Errorf("read tenant throttles: %w", err)
		}
		out.released, err = c.releaseExpiredThrottles(ctx, ss, throttles, now)
		if err != nil {
			return out, err
		}
	}

	readCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	infos, err := ts.ListTenants(readCtx)
	cancel()
	if err != nil {
		return out, fmt.Errorf("count the tenants' jobs: %w", err)
	}
	deleted := int64(0)
	if m := c.maintainerNow(); m != nil {
		deleted = m.Deleted()
	}
	cur := make(map[string]tenantSample, len(infos))
	for _, ti := range infos {
		s := tenantSample{available: ti.Counts[StateAvailable], active: ti.Counts[StateActive],
			completed: ti.Counts[StateCompleted], discarded: ti.Counts[StateDiscarded], weight: ti.Weight, weightSet: ti.Configured}
		for _, n := range ti.Counts {
			s.total += n
		}
		cur[ti.Tenant] = s
	}
	var prev map[string]tenantSample
	var dt float64
	// Rates need the previous check of this leader, not too old (another client may have led
	// meanwhile, its cleanup deletions unseen here), and no deletion by this one's cleanup since.
	if d.prev != nil && d.prevDel == deleted && now.After(d.prevAt) && now.Sub(d.prevAt) <= 2*cfg.Interval {
		prev, dt = d.prev, now.Sub(d.prevAt).Seconds()
	}
	d.prev, d.prevAt, d.prevDel = cur, now, deleted

	findings := findNoisy(cfg, cur, prev, dt)
	was := d.noisy
	d.noisy = make(map[string]string, len(findings))
	for _, f := range findings {
		out.noisy[f.tenant] = f.reason
		d.noisy[f.tenant] = f.reason
		if was[f.tenant] != f.reason {
			c.cfg.Logger.Warn("pronto: noisy neighbour", "tenant", f.tenant, "reason", f.reason, "value", f.value, "threshold", f.threshold)
		}
	}
	if !cfg.Throttle || !hasSettings || len(findings) == 0 {
		return out, nil
	}
	for _, f := range findings {
		if len(throttles) >= cfg.MaxThrottled {
			break
		}
		if _, held := throttles[f.tenant]; held {
			continue
		}
		s := cur[f.tenant]
		th := TenantThrottle{Tenant: f.tenant, Reason: f.reason, Value: f.value, Threshold: f.threshold, Action: ThrottleWeightReduced,
			OriginalWeight: s.weight, OriginalWeightSet: s.weightSet, EffectiveWeight: s.weight,
			Since: now.UTC(), Until: now.Add(cfg.ThrottleFor).UTC()}
		var apply func() error
		if s.weight > 1 {
			th.EffectiveWeight = lowered(s.weight, cfg.WeightFactor)
			apply = func() error { return ts.SetTenantWeight(ctx, f.tenant, th.EffectiveWeight) }
		} else {
			// Weight 1 cannot go lower: bound the tenant's concurrency instead, below its active jobs.
			key := TenantLimitKey(f.tenant)
			info, err := c.store.GetRateLimit(ctx, key)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				c.cfg.Logger.Warn("pronto: reading a noisy tenant's limit failed", "tenant", f.tenant, "error", err)
				continue
			}
			var eff RateLimit
			base := s.active
			if info != nil {
				orig := info.Limit
				th.OriginalLimit, eff = &orig, orig
				if orig.MaxActive > 0 {
					base = min(base, int64(orig.MaxActive))
				}
			}
			if base <= 1 {
				continue // at most one job active: nothing to lower
			}
			eff.MaxActive, eff.OnLimit = lowered(int(base), cfg.WeightFactor), LimitWait
			th.Action, th.EffectiveLimit = ThrottleConcurrencyReduced, &eff
			apply = func() error { return c.store.SetRateLimit(ctx, key, eff) }
		}
		// The record first: should the lowering fail, the release finds what is stored not what the
		// throttle stored, and leaves it.
		throttles[f.tenant] = th
		if err := c.updateThrottles(ctx, ss, func(m map[string]TenantThrottle) { m[f.tenant] = th }); err != nil {
			return out, fmt.Errorf("record the throttle of tenant %q: %w", f.tenant, err)
		}
		if err := apply(); err != nil {
			return out, fmt.Errorf("throttle tenant %q (%s): %w", f.tenant, th.Action, err)
		}
		out.throttled = append(out.throttled, f.tenant)
		c.cfg.Logger.Warn("pronto: tenant throttled", "tenant", f.tenant, "reason", f.reason, "action", th.Action,
			"weight", s.weight, "effective_weight", th.EffectiveWeight, "until", th.Until)
		c.events.emit(&Event{Kind: EventTenantThrottled, Tenant: &TenantEvent{Tenant: f.tenant, Throttle: &th}, At: now})
	}
	return out, nil
}

// lowered returns n scaled by factor, at least 1 and below n (n > 1).
func lowered(n int, factor float64) int {
	return min(n-1, max(1, int(float64(n)*factor)))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// findNoisy judges every tenant of cur (prev and dt, when set, are the previous check's counts and
// the seconds since) and returns the noisy ones, most over its threshold first.
func findNoisy(cfg NoisyNeighborConfig, cur, prev map[string]tenantSample, dt float64) []noisyFinding {
	// The contenders: tenants with jobs available or active. A tenant is judged only when another
	// has jobs waiting (available) behind it: with nobody waiting, nobody is crowded out.
	var waiting int
	var totalActive int64
	var depths []int64
	contenders := make([]string, 0, len(cur))
	for t, s := range cur {
		if s.available+s.active == 0 {
			continue
		}
		contenders = append(contenders, t)
		depths = append(depths, s.available)
		totalActive += s.active
		if s.available > 0 {
			waiting++
		}
	}
	if len(contenders) < 2 || waiting == 0 {
		return nil
	}
	slices.Sort(contenders)
	slices.Sort(depths)

	// The rates, between two checks: job count growth (inserts) and discarded share of finished jobs.
	rates := map[string]float64{}
	errRates := map[string]float64{}
	finished := map[string]int64{}
	var rateSum, errSum float64
	var errN int
	if prev != nil && dt > 0 {
		for t, s := range cur {
			p := prev[t]
			r := float64(max(0, s.total-p.total)) / dt
			if r > 0 || s.available+s.active > 0 {
				rates[t] = r
				rateSum += r
			}
			done, failed := max(0, s.completed-p.completed), max(0, s.discarded-p.discarded)
			if done+failed > 0 {
				finished[t] = done + failed
				errRates[t] = float64(failed) / float64(done+failed)
				errSum += errRates[t]
				errN++
			}
		}
	}

	var out []noisyFinding
	for _, t := range contenders {
		s := cur[t]
		othersWaiting := waiting
		if s.available > 0 {
			othersWaiting--
		}
		if othersWaiting == 0 {
			continue
		}
		var f *noisyFinding
		hit := func(reason string, value, threshold float64) {
			if f == nil || value/math.Max(threshold, 1e-9) > f.value/math.Max(f.threshold, 1e-9) {
				f = &noisyFinding{tenant: t, reason: reason, value: value, threshold: threshold}
			}
		}
		if cfg.QueueDepthRatio > 0 && s.available >= cfg.MinQueueDepth {
			th := cfg.QueueDepthRatio * medianWithout(depths, s.available)
			if float64(s.available) > th {
				hit(NoisyQueueDepth, float64(s.available), th)
			}
		}
		if cfg.ActiveShare > 0 && s.active >= cfg.MinActive && totalActive > 0 {
			share := float64(s.active) / float64(totalActive)
			if share > cfg.ActiveShare {
				hit(NoisyActiveJobs, share, cfg.ActiveShare)
			}
		}
		if r, ok := rates[t]; ok && cfg.EnqueueRateRatio > 0 && r >= cfg.MinEnqueueRate && len(rates) > 1 {
			th := cfg.EnqueueRateRatio * (rateSum - r) / float64(len(rates)-1)
			if r > th {
				hit(NoisyEnqueueRate, r, th)
			}
		}
		if e, ok := errRates[t]; ok && cfg.ErrorRateRatio > 0 && finished[t] >= cfg.MinFinished && e >= cfg.MinErrorRate && errN > 1 {
			th := cfg.ErrorRateRatio * (errSum - e) / float64(errN-1)
			if e > th {
				hit(NoisyErrorRate, e, th)
			}
		}
		if f != nil {
			out = append(out, *f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].value/math.Max(out[i].threshold, 1e-9) > out[j].value/math.Max(out[j].threshold, 1e-9)
	})
	return out
}

// medianWithout returns the median of sorted without one occurrence of v (which it holds).
func medianWithout(sorted []int64, v int64) float64 {
	n := len(sorted) - 1
	if n <= 0 {
		return 0
	}
	pos, _ := slices.BinarySearch(sorted, v)
	at := func(i int) float64 {
		if i >= pos {
			i++
		}
		return float64(sorted[i])
	}
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}
