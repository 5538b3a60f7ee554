package pronto

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Tenant priority boosts (ojs-multi-tenancy.md §7: priority_boost, "added to job priority for this
// tenant"). A tenant's boost is added to the priority of every job inserted for it (InsertOpts.Tenant)
// through any of the client's inserts (Insert, InsertMany, InsertTx, InsertSQLTx, InsertRaw,
// InsertOJS, which the HTTP server's enqueue and batch use, WorkflowInsert and the periodic jobs),
// the sum clamped to PriorityMin..PriorityMax. It applies at insert: the job's stored priority is the
// boosted one, which the job keeps; jobs already waiting when a boost changes keep the priority they
// were given.
//
// Within a tenant, priority orders the claims as always. Across tenants a fair claim still takes
// turns (docs/fair-scheduling.md): a boost does not give a tenant more turns (its weight does), it
// ranks its jobs higher where priority decides, within its turns and in the claims that take jobs in
// plain priority order.
//
// The boosts are one setting (store.SettingStore, tenantPriorityBoostsKey) for every tenant, which
// each client reads at most every boundsEvery, as it reads the tenants' enqueue limits: no round
// trip per insert, and an insert without a tenant reads nothing. A change reaches every client
// within about a second (at once in the client that made it).

// MaxTenantPriorityBoost bounds a tenant's priority boost (either way): it spans the whole priority
// range, so a boost of MaxTenantPriorityBoost raises a job of PriorityMin to PriorityMax.
const MaxTenantPriorityBoost = PriorityMax - PriorityMin

// tenantPriorityBoostsKey is the setting holding every tenant's priority boost, a JSON object of
// tenant to boost.
const tenantPriorityBoostsKey = "tenant_priority_boosts"

// tenantBoosts is a client's view of the tenants' priority boosts.
type tenantBoosts struct {
	mu     sync.Mutex
	at     time.Time
	boosts map[string]int
	// setMu queues this client's changes of the setting, which then need not retry against each
	// other (updateSetting keeps other processes' changes).
	setMu sync.Mutex
}

func readTenantPriorityBoosts(ctx context.Context, ss store.SettingStore) (map[string]int, error) {
	return readSettingMap[int](ctx, ss, tenantPriorityBoostsKey)
}

// boostedPriority returns priority raised by boost, clamped to the priority range.
func boostedPriority(priority, boost int) int {
	return min(PriorityMax, max(PriorityMin, priority+boost))
}

// applyTenantBoosts adds their tenant's boost to the priority of the jobs of ps that have a tenant.
func (c *Client) applyTenantBoosts(ctx context.Context, ps []*store.InsertParams) {
	tenanted := false
	for _, p := range ps {
		if p.Tenant != "" {
			tenanted = true
			break
		}
	}
	if !tenanted {
		return
	}
	ss, ok := c.settings()
	if !ok {
		return
	}
	b := &c.tg.boosts
	b.mu.Lock()
	if now := time.Now(); now.Sub(b.at) >= boundsEvery {
		boosts, err := readTenantPriorityBoosts(ctx, ss)
		if err != nil {
			// Fail open, as the enqueue limits do: keep the last boosts known.
			c.cfg.Logger.Warn("pronto: reading tenant priority boosts failed; keeping the last known", "error", err)
		} else {
			b.boosts = boosts
		}
		b.at = now
	}
	boosts := b.boosts
	b.mu.Unlock()
	if len(boosts) == 0 {
		return
	}
	for _, p := range ps {
		if boost := boosts[p.Tenant]; boost != 0 && p.Tenant != "" {
			p.Priority = boostedPriority(p.Priority, boost)
		}
	}
}

// TenantSetPriorityBoost stores tenant's priority boost, added to the priority of each job inserted
// for the tenant from then on (clamped to PriorityMin..PriorityMax), by every client within about a
// second. boost is -MaxTenantPriorityBoost to MaxTenantPriorityBoost; 0 removes it. Jobs already
// stored keep their priority. The store must implement store.SettingStore (all of pronto's stores
// do). Changes made through several processes at once all apply (to one tenant, the last wins).
func (c *Client) TenantSetPriorityBoost(ctx context.Context, tenant string, boost int) error {
	if err := validTenantArg(tenant); err != nil {
		return err
	}
	if boost < -MaxTenantPriorityBoost || boost > MaxTenantPriorityBoost {
		return invalidf("priority boost %d of tenant %q: must be -%d to %d", boost, tenant, MaxTenantPriorityBoost, MaxTenantPriorityBoost)
	}
	created := func() {}
	if boost != 0 {
		created = c.watchTenantCreated(ctx, tenant, "priority_boost")
	}
	if _, err := c.updateTenantPriorityBoost(ctx, tenant, boost); err != nil {
		return err
	}
	created()
	return nil
}

// TenantDeletePriorityBoost removes tenant's priority boost, or returns ErrNotFound.
func (c *Client) TenantDeletePriorityBoost(ctx context.Context, tenant string) error {
	had, err := c.updateTenantPriorityBoost(ctx, tenant, 0)
	if err != nil {
		return err
	}
	if !had {
		return wrapOp(fmt.Sprintf("priority boost of tenant %q", tenant), fmt.Errorf("none stored: %w", store.ErrNotFound))
	}
	return nil
}

// updateTenantPriorityBoost stores boost for tenant (0: removes it) and reports whether the tenant
// had one.
func (c *Client) updateTenantPriorityBoost(ctx context.Context, tenant string, boost int) (bool, error) {
	ss, ok := c.settings()
	if !ok {
		return false, fmt.Errorf("pronto: %T keeps no settings (store.SettingStore): %w", c.store, ErrUnsupported)
	}
	b := &c.tg.boosts
	b.setMu.Lock()
	defer b.setMu.Unlock()
	var had bool
	err := updateSettingMap(ctx, ss, tenantPriorityBoostsKey, func(m map[string]int) error {
		_, had = m[tenant]
		if boost == 0 {
			delete(m, tenant)
		} else {
			m[tenant] = boost
		}
		return nil
	})
	if err != nil {
		return had, wrapOp(fmt.Sprintf("priority boost of tenant %q", tenant), err)
	}
	b.mu.Lock()
	b.at = time.Time{} // this client's next insert reads the change
	b.mu.Unlock()
	return had, nil
}

// TenantPriorityBoosts returns every tenant's priority boost (see TenantSetPriorityBoost); an empty
// map when the store keeps no settings.
func (c *Client) TenantPriorityBoosts(ctx context.Context) (map[string]int, error) {
	ss, ok := c.settings()
	if !ok {
		return map[string]int{}, nil
	}
	m, err := readTenantPriorityBoosts(ctx, ss)
	if err != nil {
		return nil, wrapOp("tenant priority boosts", err)
	}
	return m, nil
}
