package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.TenantStore = (*Store)(nil)

// Tenants: a tenant's weight lives in the global hash <prefix>tw (tenant -> weight) with its time
// in <prefix>twat; its jobs per state across queues in <prefix>tc:<tenant> (fields n:<state>, kept by
// the scripts' place and unplace from the job's tng field), and the tenants that have had jobs in
// the sorted set <prefix>tenants. These span queues, so slots: on a Redis Cluster jobs carry no tng
// field, weights are refused (store.ErrUnsupported) and so are the stats.

func (s *Store) tenantsUnsupported(op string) error {
	if s.cluster() {
		return fmt.Errorf("redis: %s: tenant weights and stats on a Redis Cluster (they span queues, so slots): %w", op, store.ErrUnsupported)
	}
	return nil
}

// SetTenantWeight stores tenant's weight; claims honour it from the next one on.
func (s *Store) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if err := s.tenantsUnsupported("set tenant weight"); err != nil {
		return err
	}
	if tenant == "" || weight < 1 || weight > store.MaxTenantWeight {
		return fmt.Errorf("redis: set tenant weight %q to %d (want a tenant and 1 to %d): %w",
			tenant, weight, store.MaxTenantWeight, store.ErrInvalidParams)
	}
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.HSet(ctx, s.prefix+"tw", tenant, weight)
		p.HSet(ctx, s.prefix+"twat", tenant, time.Now().UnixMicro())
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: set tenant weight %q: %w", tenant, err)
	}
	return nil
}

// DeleteTenantWeight forgets tenant's stored weight.
func (s *Store) DeleteTenantWeight(ctx context.Context, tenant string) error {
	if err := s.tenantsUnsupported("delete tenant weight"); err != nil {
		return err
	}
	var del *goredis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		del = p.HDel(ctx, s.prefix+"tw", tenant)
		p.HDel(ctx, s.prefix+"twat", tenant)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: delete tenant weight %q: %w", tenant, err)
	}
	if del.Val() == 0 {
		return fmt.Errorf("redis: tenant %q has no stored weight: %w", tenant, store.ErrNotFound)
	}
	return nil
}

// tenantInfos reads the weights and counts of names (those with neither are left out).
func (s *Store) tenantInfos(ctx context.Context, names []string) ([]*store.TenantInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var w, at *goredis.SliceCmd
	counts := make([]*goredis.MapStringStringCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		w = p.HMGet(ctx, s.prefix+"tw", names...)
		at = p.HMGet(ctx, s.prefix+"twat", names...)
		for i, n := range names {
			counts[i] = p.HGetAll(ctx, s.prefix+"tc:"+n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*store.TenantInfo, 0, len(names))
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
		for f, v := range counts[i].Val() {
			if st, ok := strings.CutPrefix(f, "n:"); ok {
				if c, _ := strconv.ParseInt(v, 10, 64); c > 0 {
					info.Counts[store.State(st)] = c
				}
			}
		}
		if info.Configured || len(info.Counts) > 0 {
			out = append(out, info)
		}
	}
	return out, nil
}

// GetTenant returns tenant's weight and its jobs per state across queues.
func (s *Store) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	if err := s.tenantsUnsupported("tenant"); err != nil {
		return nil, err
	}
	infos, err := s.tenantInfos(ctx, []string{tenant})
	if err != nil {
		return nil, fmt.Errorf("redis: tenant %q: %w", tenant, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("redis: tenant %q: %w", tenant, store.ErrNotFound)
	}
	return infos[0], nil
}

// ListTenants returns every tenant with a stored weight or jobs, in tenant order. Tenants whose
// jobs are all gone are dropped from <prefix>tenants on the way.
func (s *Store) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	if err := s.tenantsUnsupported("list tenants"); err != nil {
		return nil, err
	}
	seen, err := s.rdb.ZRange(ctx, s.prefix+"tenants", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	weighted, err := s.rdb.HKeys(ctx, s.prefix+"tw").Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	names := append(seen, weighted...)
	slices.Sort(names)
	names = slices.Compact(names)
	infos, err := s.tenantInfos(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("redis: list tenants: %w", err)
	}
	kept := make(map[string]bool, len(infos))
	for _, i := range infos {
		kept[i.Tenant] = true
	}
	var gone []any
	for _, n := range seen {
		if !kept[n] {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		// A job arriving meanwhile adds its tenant back with its next transition.
		s.rdb.ZRem(ctx, s.prefix+"tenants", gone...)
	}
	return infos, nil
}
