package pronto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// inserted since. Inserts of tenants without enqueue limits read nothing, nor count: a tenant limited
// anew, or whose limits changed, is recounted at its next insert. The price is precision, as
// for backpressure: jobs started since the last read still count (the limit is met early, never late,
// by one client), and what other clients inserted meanwhile is not seen yet. A recount adds the
// client's own inserts still being written (inflight), which it may not see, those in application
// transactions not ended yet among them (see holdUntilTxEnds), and a job the store did
// not keep is taken back out of the count that held it only, not of a later recount. The enqueue rate is
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
	// EnqueueRate bounds the tenant's inserts per EnqueuePeriod, counted by each client. An insert the
	// store did not store is not counted, but one whose caller gave up mid-write is (its write may
	// still store the job).
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
	// setMu serializes this client's changes of the limits setting, sparing them retries of
	// updateSetting against one another.
	setMu sync.Mutex
	// boosts are the tenants' priority boosts (tenantboost.go), read the same way.
	boosts tenantBoosts
	// countEvery, when positive, replaces the package's depthEvery (tests only).
	countEvery time.Duration
	// inflight holds, by tenant, what admissions counted whose insert has not returned yet (or whose
	// application transaction has not ended); flights
	// what each such insert counted, under its first job (as backpressure's, see landTenants).
	inflight map[string]*tenantAdding
	flights  map[*store.InsertParams]map[string]*tenantAdding
	// flying is len(flights), read without mu: an insert of no limited tenant (none in flight)
	// lands without taking mu.
	flying atomic.Int64
}

func (g *tenantGate) recountEvery() time.Duration {
	if g.countEvery > 0 {
		return g.countEvery
	}
	return depthEvery
}

// relimit replaces the limits with limits just read. A tenant no longer limited loses its counts (its
// inserts are no longer counted), so one limited anew starts with a fresh count and rate window; one
// whose limits changed is recounted at its next insert. Either way a count read under earlier limits
// cannot let new ones be met late. g.mu must be held.
func (g *tenantGate) relimit(limits map[string]TenantEnqueueLimits) {
	for t, tc := range g.tenants {
		l, limited := limits[t]
		switch {
		case !limited:
			delete(g.tenants, t)
		case l != g.limits[t]:
			tc.at = time.Time{}
		}
	}
	g.limits = limits
}

type tenantCount struct {
	waiting, scheduled int64
	at                 time.Time
	// reads counts the recounts of waiting and scheduled: a refund applies to the count it was
	// admitted into only, as a later one was read from the store (plus what was in flight).
	reads       int64
	windowStart time.Time
	windowCount int64
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

// tenantAdmission is what checkTenantLimits counted for an insert: the limited tenants whose counts
// it raised, so that the jobs the store did not insert are taken back out; and the jobs it left out
// as duplicates of held keys.
type tenantAdmission struct {
	// tenants are the limited tenants whose counts it raised, each with the tenant's reads and rate
	// window then.
	tenants map[string]tenantCounted
	// skipped[i] reports that ps[i] was not counted; nil when every job was.
	skipped []bool
}

// tenantCounted is which of a tenant's counts an admission raised.
type tenantCounted struct {
	reads       int64
	windowStart time.Time
}

// counted reports whether checkTenantLimits counted the i-th job of the insert.
func (a tenantAdmission) counted(i int) bool { return a.skipped == nil || !a.skipped[i] }

// refund takes the jobs of ps that checkTenantLimits counted, none of which the store inserted (the
// insert failed, or was refused before the store), back out of their tenants' counts: a refused
// insert uses up none of a tenant's enqueue rate.
func (c *Client) refund(adm tenantAdmission, ps []*store.InsertParams) {
	c.landTenants(ps)
	if len(adm.tenants) == 0 {
		return
	}
	var counted []*store.InsertParams
	for i, p := range ps {
		if adm.counted(i) {
			counted = append(counted, p)
		}
	}
	c.adjustTenants(adm, counted, -1)
}

// adjustTenants adds by (1 or -1) per job of jobs to the counts of the tenants adm raised, unless a
// recount replaced them since (the rate window: unless it rolled over).
func (c *Client) adjustTenants(adm tenantAdmission, jobs []*store.InsertParams, by int64) {
	if len(adm.tenants) == 0 || len(jobs) == 0 {
		return
	}
	g := &c.tg
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range jobs {
		tc := g.tenants[p.Tenant]
		raised, ok := adm.tenants[p.Tenant]
		if !ok || tc == nil {
			continue
		}
		if tc.reads == raised.reads {
			tc.waiting = max(tc.waiting+by, 0)
			if p.State == StateScheduled {
				tc.scheduled = max(tc.scheduled+by, 0)
			}
		}
		if tc.windowStart.Equal(raised.windowStart) {
			tc.windowCount = max(tc.windowCount+by, 0)
		}
	}
}

// landTenants ends what checkTenantLimits counted for ps being in flight, once their insert returned:
// a recount from now on sees what the store kept of them. Every path that ends an insert the limits
// admitted calls it, some twice (refund, refundUnstored, settleFastTenants); only the first counts.
func (c *Client) landTenants(ps []*store.InsertParams) {
	if len(ps) == 0 {
		return
	}
	g := &c.tg
	if g.flying.Load() == 0 { // this insert's own flight, if any, was counted by its goroutine
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	flight, ok := g.flights[ps[0]]
	if !ok {
		return
	}
	delete(g.flights, ps[0])
	g.flying.Add(-1)
	g.subtract(flight)
}

// holdTenants takes what checkTenantLimits counted for ps out of flight without landing it, as
// holdDepths does for the queues' depths: it stays added to every recount until release is called,
// once the application's transaction that holds ps ended. nil when ps counted nothing, or landed.
func (c *Client) holdTenants(ps []*store.InsertParams) (release func()) {
	g := &c.tg
	if len(ps) == 0 || g.flying.Load() == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	flight, ok := g.flights[ps[0]]
	if !ok {
		return nil
	}
	delete(g.flights, ps[0])
	g.flying.Add(-1)
	return sync.OnceFunc(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.subtract(flight)
	})
}

// subtract takes what one insert counted out of inflight. g.mu must be held.
func (g *tenantGate) subtract(flight map[string]*tenantAdding) {
	for t, a := range flight {
		in := g.inflight[t]
		if in == nil {
			continue
		}
		in.all -= a.all
		in.scheduled -= a.scheduled
		if in.all <= 0 && in.scheduled <= 0 {
			delete(g.inflight, t)
		}
	}
}

// refundUnstored settles the tenants' counts once an insert of ps returned rows (in ps's order) and
// err: the counted jobs it did not store are taken back out, and a job left out as a duplicate that
// the store kept after all (its key's holder moved on meanwhile) is counted. Not stored are: after
// success, the unique duplicates; after a refusal of the whole insert (a unique conflict, a taken
// id, a job the store cannot take), every job; after another error, the jobs a look-up by id does
// not find. A job that may be stored stays counted, so that a limit is met early, never late: when
// ctx has ended (a merged write goes on without the caller who gave up, and may store its job
// after this returns), or when the look-up fails.
func (c *Client) refundUnstored(ctx context.Context, adm tenantAdmission, ps []*store.InsertParams, rows []*JobRow, err error) {
	c.landTenants(ps)
	if len(adm.tenants) == 0 {
		return
	}
	switch {
	case err == nil && len(rows) == len(ps):
		var unstored, uncounted []*store.InsertParams
		for i, r := range rows {
			switch {
			case r == nil:
			case r.Duplicate && adm.counted(i):
				unstored = append(unstored, ps[i])
			case !r.Duplicate && !adm.counted(i):
				uncounted = append(uncounted, ps[i])
			}
		}
		c.adjustTenants(adm, unstored, -1)
		c.adjustTenants(adm, uncounted, 1)
	case errors.Is(err, ErrUniqueConflict) || errors.Is(err, ErrDuplicate) || errors.Is(err, ErrInvalidArgs) ||
		errors.Is(err, store.ErrInvalidParams) || errors.Is(err, ErrUnsupported):
		c.refund(adm, ps)
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The write may still land: a look-up now could miss the job.
	default:
		c.adjustTenants(adm, c.notFound(ctx, adm, ps), -1)
	}
}

// notFound returns the jobs of ps that checkTenantLimits counted and the store does not hold, as
// looked up by id once their insert has ended; it stops at the first look-up that fails, the jobs
// not looked up counting as found.
func (c *Client) notFound(ctx context.Context, adm tenantAdmission, ps []*store.InsertParams) []*store.InsertParams {
	var out []*store.InsertParams
	for i, p := range ps {
		if _, raised := adm.tenants[p.Tenant]; !adm.counted(i) || !raised {
			continue
		}
		_, err := c.store.GetJob(ctx, p.ID)
		if !errors.Is(err, store.ErrNotFound) {
			if err != nil {
				c.cfg.Logger.Warn("pronto: looking up jobs of a failed insert failed; their tenants' enqueue counts keep them", "error", err)
				break
			}
			continue
		}
		out = append(out, p)
	}
	return out
}

// settleFastTenants settles the tenants' counts once an InsertFast of ps stored n of them, without
// saying which (the others were unique duplicates): exactly when the jobs that could be duplicates
// (those with a unique key) are all one tenant's. Otherwise the tenants' depths are read again at
// their next insert, and their enqueue-rate windows may count the duplicates until they roll over.
func (c *Client) settleFastTenants(adm tenantAdmission, ps []*store.InsertParams, n int) {
	c.landDepths(ps) // the one call of an InsertManyFast that stored every job (settleFastDepths)
	c.landTenants(ps)
	dups := len(ps) - n
	if len(adm.tenants) == 0 || (dups == 0 && adm.skipped == nil) {
		return
	}
	var counted, skipped []*store.InsertParams // of the jobs with a unique key
	for i, p := range ps {
		switch {
		case p.UniqueKey == "":
		case adm.counted(i):
			counted = append(counted, p)
		default:
			skipped = append(skipped, p)
		}
	}
	keyed := slices.Concat(counted, skipped)
	if len(keyed) >= dups && !slices.ContainsFunc(keyed, func(p *store.InsertParams) bool { return p.Tenant != keyed[0].Tenant }) {
		// Of the keyed jobs, dups were not stored and len(skipped) not counted.
		if d := dups - len(skipped); d > 0 {
			c.adjustTenants(adm, counted[:d], -1)
		} else if d < 0 {
			c.adjustTenants(adm, skipped[:-d], 1)
		}
		return
	}
	g := &c.tg
	g.mu.Lock()
	defer g.mu.Unlock()
	for t := range adm.tenants {
		if tc := g.tenants[t]; tc != nil {
			tc.at = time.Time{}
		}
	}
}

// tenantAdding is what an insert adds to one limited tenant's counts.
type tenantAdding struct{ all, scheduled int }

// tenantsAdding counts the jobs of ps of limited tenants by tenant, leaving out those skipped marks
// (nil: none), and returns the tenants in order. Every limited tenant of ps is present, with zeros
// when all its jobs are left out. g.mu must be held.
func (g *tenantGate) adding(ps []*store.InsertParams, skipped []bool) (map[string]*tenantAdding, []string) {
	var add map[string]*tenantAdding
	var order []string
	for i, p := range ps {
		if p.Tenant == "" {
			continue
		}
		if _, limited := g.limits[p.Tenant]; !limited {
			continue
		}
		if add == nil {
			add = map[string]*tenantAdding{}
		}
		a := add[p.Tenant]
		if a == nil {
			a = &tenantAdding{}
			add[p.Tenant] = a
			order = append(order, p.Tenant)
		}
		if skipped != nil && skipped[i] {
			continue
		}
		a.all++
		if p.State == StateScheduled {
			a.scheduled++
		}
	}
	slices.Sort(order)
	return add, order
}

// checkTenantLimits refuses ps when one of its tenants would go beyond an enqueue limit, and
// otherwise counts ps into the tenants' counts, returning what it counted (see refund). Before
// refusing, it leaves out the jobs that would store nothing, as held tells (heldKeys.duplicates).
func (c *Client) checkTenantLimits(ctx context.Context, ps []*store.InsertParams, held *heldKeys) (tenantAdmission, error) {
	ss, ok := c.settings()
	if !ok {
		return tenantAdmission{}, nil
	}
	ts, ok := c.store.(store.TenantStore)
	if !ok {
		return tenantAdmission{}, nil
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
			g.relimit(limits)
		}
		g.limitsAt = now
	}
	if len(g.limits) == 0 {
		return tenantAdmission{}, nil
	}
	skipped := held.known()
	add, order := g.adding(ps, skipped)
	if add == nil {
		return tenantAdmission{}, nil
	}
	if g.tenants == nil {
		g.tenants = map[string]*tenantCount{}
	}
	for {
		refusal, err := g.refusal(ctx, ts, add, order, now)
		if err != nil {
			return tenantAdmission{}, err
		}
		if refusal == nil {
			break
		}
		if !held.mayHelp(c, func(p *store.InsertParams) bool { return p.Tenant == refusal.Tenant }) {
			return tenantAdmission{}, refusal
		}
		if skipped = held.duplicates(ctx, c); skipped == nil {
			return tenantAdmission{}, refusal
		}
		add, order = g.adding(ps, skipped)
	}
	adm := tenantAdmission{tenants: make(map[string]tenantCounted, len(order)), skipped: skipped}
	if g.inflight == nil {
		g.inflight, g.flights = map[string]*tenantAdding{}, map[*store.InsertParams]map[string]*tenantAdding{}
	}
	flight := g.flights[ps[0]] // nil unless the same jobs are being inserted twice at once
	if flight == nil {
		flight = make(map[string]*tenantAdding, len(order))
		g.flights[ps[0]] = flight
		g.flying.Add(1)
	}
	for _, t := range order {
		tc, a := g.tenants[t], add[t]
		tc.waiting += int64(a.all)
		tc.scheduled += int64(a.scheduled)
		tc.windowCount += int64(a.all)
		adm.tenants[t] = tenantCounted{reads: tc.reads, windowStart: tc.windowStart}
		for _, m := range []map[string]*tenantAdding{flight, g.inflight} {
			if m[t] == nil {
				m[t] = &tenantAdding{}
			}
			m[t].all += a.all
			m[t].scheduled += a.scheduled
		}
	}
	return adm, nil
}

// refusal reads the counts of the tenants of order that are due a read, and returns the refusal of
// the first one add would take beyond a limit, or nil. A tenant adding nothing is never refused.
// g.mu must be held.
func (g *tenantGate) refusal(ctx context.Context, ts store.TenantStore, add map[string]*tenantAdding, order []string, now time.Time) (*TenantLimitError, error) {
	for _, t := range order {
		l, a := g.limits[t], add[t]
		tc := g.tenants[t]
		if tc == nil {
			tc = &tenantCount{}
			g.tenants[t] = tc
		}
		if (l.MaxQueueDepth > 0 || l.MaxScheduled > 0) && now.Sub(tc.at) >= g.recountEvery() {
			info, err := ts.GetTenant(ctx, t)
			var in tenantAdding // the client's own inserts being written, which the read may miss
			if g.inflight[t] != nil {
				in = *g.inflight[t]
			}
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUnsupported):
				// No jobs; or a store that cannot count them (TenantSetEnqueueLimits refuses depth
				// limits there): nothing counted.
				tc.waiting, tc.scheduled = int64(in.all), int64(in.scheduled)
			case err != nil:
				return nil, fmt.Errorf("counting the jobs of tenant %q for its enqueue limits: %w", t, err)
			default:
				tc.waiting = int64(in.all)
				for _, st := range waitingStates {
					tc.waiting += info.Counts[st]
				}
				tc.scheduled = info.Counts[StateScheduled] + int64(in.scheduled)
			}
			tc.at = now
			tc.reads++
		}
		retry := g.recountEvery() - now.Sub(tc.at)
		if l.MaxQueueDepth > 0 && a.all > 0 && tc.waiting+int64(a.all) > l.MaxQueueDepth {
			return &TenantLimitError{Tenant: t, Limit: TenantLimitQueueDepth, Current: tc.waiting, Maximum: l.MaxQueueDepth, Adding: a.all, RetryAfter: retry}, nil
		}
		if l.MaxScheduled > 0 && a.scheduled > 0 && tc.scheduled+int64(a.scheduled) > l.MaxScheduled {
			return &TenantLimitError{Tenant: t, Limit: TenantLimitScheduled, Current: tc.scheduled, Maximum: l.MaxScheduled, Adding: a.scheduled, RetryAfter: retry}, nil
		}
		if l.EnqueueRate > 0 {
			if now.Sub(tc.windowStart) >= l.EnqueuePeriod {
				tc.windowStart, tc.windowCount = now, 0
			}
			if a.all > 0 && tc.windowCount+int64(a.all) > l.EnqueueRate {
				return &TenantLimitError{Tenant: t, Limit: TenantLimitEnqueueRate, Current: tc.windowCount, Maximum: l.EnqueueRate, Adding: a.all,
					RetryAfter: tc.windowStart.Add(l.EnqueuePeriod).Sub(now)}, nil
			}
		}
	}
	return nil, nil
}

// TenantSetEnqueueLimits stores tenant's enqueue limits, replacing any; a zero l removes them. Every
// client applies them within about a second. Clients in several processes may change enqueue limits
// at once, of one tenant or several: none overwrites another's change (a change that keeps losing
// to others fails with store.ErrSettingContended, never silently), and the last to be stored of one
// tenant's wins. Jobs inserted into an application's transaction (InsertTx, InsertSQLTx) count
// against MaxQueueDepth and MaxScheduled from the insert until the transaction ends, committed or
// rolled back. The store must implement store.SettingStore and store.TenantStore (all of pronto's
// stores do).
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
	err = updateSettingMap(ctx, ss, tenantEnqueueLimitsKey, func(m map[string]TenantEnqueueLimits) error {
		if l.IsZero() {
			delete(m, tenant)
		} else {
			m[tenant] = l
		}
		return nil
	})
	if err != nil {
		return wrapOp(fmt.Sprintf("enqueue limits of tenant %q", tenant), err)
	}
	g.mu.Lock()
	g.limitsAt = time.Time{}
	if tc := g.tenants[tenant]; tc != nil {
		tc.at = time.Time{} // recounted under the new limits (see relimit)
	}
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
