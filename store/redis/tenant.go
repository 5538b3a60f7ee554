package redis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.TenantStore = (*Store)(nil)

// Tenants: a tenant's weight lives in the global hash <prefix>tw (tenant -> weight) with its time
// in <prefix>twat. On a single node its jobs per state across queues are in <prefix>tc:<tenant>
// (fields n:<state>, kept by the scripts' place and unplace from the job's tng field), and the
// tenants that have had jobs in the sorted set <prefix>tenants.
//
// On a Redis Cluster those keys would span slots, so each queue keeps its own: the counts
// B..tc:<tenant> and the set B..tenants (from the job's tnq field), summed here across the
// registered queues; and a copy of the weights, B..tw, which the claim reads. Setting or deleting a
// weight writes the global hash, then every registered queue's copy; a queue's first insert copies
// the global hash into the new queue before its jobs are written (seedWeights), and Cleanup copies
// it into every queue again (syncWeights), which repairs a copy that a weight change made at the
// very moment of a queue's first insert left behind.

// SetTenantWeight stores tenant's weight; claims honour it from the next one on.
func (s *Store) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if tenant == "" || weight < 1 || weight > store.MaxTenantWeight {
		return fmt.Errorf("redis: set tenant weight %q to %d (want a tenant and 1 to %d): %w",
			tenant, weight, store.MaxTenantWeight, store.ErrInvalidParams)
	}
	err := s.writeWeight(ctx, func(p goredis.Pipeliner) {
		p.HSet(ctx, s.prefix+"tw", tenant, weight)
		p.HSet(ctx, s.prefix+"twat", tenant, time.Now().UnixMicro())
	}, func(p goredis.Pipeliner, queue string) {
		p.HSet(ctx, s.qkey(queue)+"tw", tenant, weight)
	})
	if err != nil {
		return fmt.Errorf("redis: set tenant weight %q: %w", tenant, err)
	}
	return nil
}

// DeleteTenantWeight forgets tenant's stored weight.
func (s *Store) DeleteTenantWeight(ctx context.Context, tenant string) error {
	var del *goredis.IntCmd
	err := s.writeWeight(ctx, func(p goredis.Pipeliner) {
		del = p.HDel(ctx, s.prefix+"tw", tenant)
		p.HDel(ctx, s.prefix+"twat", tenant)
	}, func(p goredis.Pipeliner, queue string) {
		p.HDel(ctx, s.qkey(queue)+"tw", tenant)
	})
	if err != nil {
		return fmt.Errorf("redis: delete tenant weight %q: %w", tenant, err)
	}
	if del.Val() == 0 {
		return fmt.Errorf("redis: tenant %q has no stored weight: %w", tenant, store.ErrNotFound)
	}
	return nil
}

// writeWeight writes the global weight hashes (global: one transaction on a single node; on a
// cluster, where tw and twat may hash to different slots, one pipeline), then on a cluster every
// registered queue's copy (perQueue).
func (s *Store) writeWeight(ctx context.Context, global func(goredis.Pipeliner), perQueue func(goredis.Pipeliner, string)) error {
	if !s.cluster() {
		_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error { global(p); return nil })
		return err
	}
	if _, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error { global(p); return nil }); err != nil {
		return err
	}
	qs, err := s.queues(ctx)
	if err != nil || len(qs) == 0 {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, q := range qs {
			perQueue(p, q)
		}
		return nil
	})
	return err
}

// weightArgs reads the global weights as SetWeights arguments (tenant, weight, ...).
func (s *Store) weightArgs(ctx context.Context) ([]any, error) {
	w, err := s.rdb.HGetAll(ctx, s.prefix+"tw").Result()
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 2*len(w))
	for _, tn := range slices.Sorted(maps.Keys(w)) {
		args = append(args, tn, w[tn])
	}
	return args, nil
}

// seedWeights copies the global weights into the copies of queues, new to the registry, on a
// cluster (see the comment at the top of this file).
func (s *Store) seedWeights(ctx context.Context, queues []string) error {
	if len(queues) == 0 || !s.cluster() {
		return nil
	}
	args, err := s.weightArgs(ctx)
	if err != nil || len(args) == 0 {
		return err
	}
	return s.setWeights(ctx, queues, args)
}

// weightSyncEvery is how often Cleanup, which maintenance calls in a loop until a pass is done,
// copies the weights into every queue (syncWeights).
const weightSyncEvery = 30 * time.Second

// syncWeights copies the global weights into every registered queue's copy, on a cluster, at most
// once per weightSyncEvery.
func (s *Store) syncWeights(ctx context.Context) error {
	last := s.weightsSynced.Load()
	if !s.cluster() || time.Since(time.Unix(0, last)) < weightSyncEvery ||
		!s.weightsSynced.CompareAndSwap(last, time.Now().UnixNano()) {
		return nil
	}
	qs, err := s.queues(ctx)
	if err != nil || len(qs) == 0 {
		return err
	}
	args, err := s.weightArgs(ctx)
	if err != nil {
		return err
	}
	return s.setWeights(ctx, qs, args)
}

// setWeights replaces the weight copies of queues with args, one script per queue.
func (s *Store) setWeights(ctx context.Context, queues []string, args []any) error {
	return s.pipelinedScripts(ctx, func(run runScript) {
		for _, q := range queues {
			run(scriptSetWeights, s.keys(q), args...)
		}
	})
}

// registerQueues queues, on pl, the registration of queues in the registry, one SADD each: the
// replies tell newQueues which of them are new.
func (s *Store) registerQueues(ctx context.Context, pl goredis.Pipeliner, queues []string) []*goredis.IntCmd {
	cmds := make([]*goredis.IntCmd, len(queues))
	for i, q := range queues {
		cmds[i] = pl.SAdd(ctx, s.queuesKey(), q)
	}
	return cmds
}

// newQueues returns the queues whose registration (registerQueues) added them.
func newQueues(queues []string, cmds []*goredis.IntCmd) []string {
	var out []string
	for i, c := range cmds {
		if c.Val() > 0 {
			out = append(out, queues[i])
		}
	}
	return out
}

// tenantCount is one (queue, tenant) pair whose counts a cluster keeps; queue "" for the global
// counts of a single node.
type tenantCount struct{ queue, tenant string }

// countsKey is where p's counts live.
func (s *Store) countsKey(p tenantCount) string {
	if p.queue == "" {
		return s.prefix + "tc:" + p.tenant
	}
	return s.qkey(p.queue) + "tc:" + p.tenant
}

// tenantInfos reads the weights of names and the counts of pairs, summed per tenant (tenants with
// neither a weight nor a job are left out), and returns the pairs whose counts are all zero.
func (s *Store) tenantInfos(ctx context.Context, names []string, pairs []tenantCount) ([]*store.TenantInfo, []tenantCount, error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	var w, at *goredis.SliceCmd
	counts := make([]*goredis.MapStringStringCmd, len(pairs))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		w = p.HMGet(ctx, s.prefix+"tw", names...)
		at = p.HMGet(ctx, s.prefix+"twat", names...)
		for i, pr := range pairs {
			counts[i] = p.HGetAll(ctx, s.countsKey(pr))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*store.TenantInfo, len(names))
	for i, n := range names {
		info := &store.TenantInfo{Tenant: n, Weight: store.DefaultTenantWeight, Counts: map[store.State]int64{}}
		if v, ok := w.Val()[i].(string); ok {
			info.Weight, _ = strconv.Atoi(v)
			info.Configured = true
			if us, ok := at.Val()[i].(string); ok {
				n, _ := strconv.ParseInt(us, 10, 64)
				info.UpdatedAt = time.UnixMicro(n).UTC()
			}
		}
		byName[n] = info
	}
	var empty []tenantCount
	for i, pr := range pairs {
		info := byName[pr.tenant]
		counted := false
		for f, v := range counts[i].Val() {
			if st, ok := strings.CutPrefix(f, "n:"); ok {
				if c, _ := strconv.ParseInt(v, 10, 64); c > 0 && info != nil {
					info.Counts[store.State(st)] += c
					counted = true
				}
			}
		}
		if !counted {
			empty = append(empty, pr)
		}
	}
	out := make([]*store.TenantInfo, 0, len(names))
	for _, n := range names {
		if info := byName[n]; info.Configured || len(info.Counts) > 0 {
			out = append(out, info)
		}
	}
	return out, empty, nil
}

// GetTenant returns tenant's weight and its jobs per state across queues.
func (s *Store) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	pairs := []tenantCount{{"", tenant}}
	if s.cluster() {
		qs, err := s.queues(ctx)
		if err != nil {
			return nil, fmt.Errorf("redis: tenant %q: %w", tenant, err)
		}
		pairs = pairs[:0]
		for _, q := range qs {
			pairs = append(pairs, tenantCount{q, tenant})
		}
	}
	infos, _, err := s.tenantInfos(ctx, []string{tenant}, pairs)
	if err != nil {
		return nil, fmt.Errorf("redis: tenant %q: %w", tenant, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("redis: tenant %q: %w", tenant, store.ErrNotFound)
	}
	return infos[0], nil
}

// ListTenants returns every tenant with a stored weight or jobs, in tenant order. Tenants whose
// jobs are all gone are dropped from <prefix>tenants (on a cluster, from the queue's set) on the
// way.
func (s *Store) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	pairs, err := s.tenantPairs(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	weighted, err := s.rdb.HKeys(ctx, s.prefix+"tw").Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	names := weighted
	for _, p := range pairs {
		names = append(names, p.tenant)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	infos, empty, err := s.tenantInfos(ctx, names, pairs)
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	if len(empty) > 0 {
		// A job arriving meanwhile adds its tenant back with its next transition.
		_, _ = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, pr := range empty {
				p.ZRem(ctx, s.tenantsKey(pr.queue), pr.tenant)
			}
			return nil
		})
	}
	return infos, nil
}

// tenantsKey is the set of tenants that have had jobs: the store's, or on a cluster queue's.
func (s *Store) tenantsKey(queue string) string {
	if queue == "" {
		return s.prefix + "tenants"
	}
	return s.qkey(queue) + "tenants"
}

// tenantPairs returns the (queue, tenant) pairs whose counts the store keeps: on a single node
// every tenant of <prefix>tenants with queue "", on a cluster every tenant of each registered
// queue's set.
func (s *Store) tenantPairs(ctx context.Context) ([]tenantCount, error) {
	qs := []string{""}
	if s.cluster() {
		var err error
		if qs, err = s.queues(ctx); err != nil {
			return nil, err
		}
	}
	cmds := make([]*goredis.StringSliceCmd, len(qs))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, q := range qs {
			cmds[i] = p.ZRange(ctx, s.tenantsKey(q), 0, -1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var pairs []tenantCount
	for i, c := range cmds {
		for _, tn := range c.Val() {
			pairs = append(pairs, tenantCount{qs[i], tn})
		}
	}
	return pairs, nil
}
