package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.TenantStore = (*Store)(nil)

// Tenant weights live in pronto_tenants (migration 009); a tenant's counts come from
// pronto_jobs_tenant_state, which only jobs with a tenant enter.

// SetTenantWeight stores tenant's weight; claims honour it from the next one on.
func (s *Store) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if tenant == "" || weight < 1 || weight > store.MaxTenantWeight {
		return fmt.Errorf("set tenant weight %q to %d (want a tenant and 1 to %d): %w",
			tenant, weight, store.MaxTenantWeight, store.ErrInvalidParams)
	}
	nowUS, _ := s.nowMicro()
	_, err := s.w.ExecContext(ctx, `INSERT INTO pronto_tenants (tenant, weight, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight, updated_at = excluded.updated_at`, tenant, weight, nowUS)
	if err != nil {
		return fmt.Errorf("set tenant weight %q: %w", tenant, s.schemaHint(err))
	}
	return nil
}

// DeleteTenantWeight forgets tenant's stored weight.
func (s *Store) DeleteTenantWeight(ctx context.Context, tenant string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM pronto_tenants WHERE tenant = ?1`, tenant)
	if err != nil {
		return fmt.Errorf("delete tenant weight %q: %w", tenant, s.schemaHint(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("tenant %q has no stored weight: %w", tenant, store.ErrNotFound)
	}
	return nil
}

// tenantsSQL returns one row per tenant and state of its jobs, then one row per stored weight
// (state NULL), for tenant ?1 (NULL for every tenant).
const tenantsSQL = `SELECT tenant, state, count(*), NULL, NULL FROM pronto_jobs INDEXED BY pronto_jobs_tenant_state
	WHERE tenant IS NOT NULL AND (?1 IS NULL OR tenant = ?1) GROUP BY tenant, state
UNION ALL
SELECT tenant, NULL, 0, weight, updated_at FROM pronto_tenants WHERE ?1 IS NULL OR tenant = ?1`

// tenantInfos runs tenantsSQL for tenant (nil for every tenant).
func (s *Store) tenantInfos(ctx context.Context, tenant any) ([]*store.TenantInfo, error) {
	rows, err := s.r.QueryContext(ctx, tenantsSQL, tenant)
	if err != nil {
		return nil, s.schemaHint(err)
	}
	defer rows.Close()
	by := map[string]*store.TenantInfo{}
	for rows.Next() {
		var (
			name            string
			state           sql.NullString
			n               int64
			weight, updated sql.NullInt64
		)
		if err := rows.Scan(&name, &state, &n, &weight, &updated); err != nil {
			return nil, err
		}
		info := by[name]
		if info == nil {
			info = &store.TenantInfo{Tenant: name, Weight: store.DefaultTenantWeight, Counts: map[store.State]int64{}}
			by[name] = info
		}
		if state.Valid && n > 0 {
			info.Counts[store.State(state.String)] = n
		}
		if weight.Valid {
			info.Weight, info.Configured, info.UpdatedAt = int(weight.Int64), true, microTime(updated.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]*store.TenantInfo, 0, len(by))
	for _, info := range by {
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b *store.TenantInfo) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}

// GetTenant returns tenant's weight and its jobs per state across queues.
func (s *Store) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	infos, err := s.tenantInfos(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	return infos[0], nil
}

// ListTenants returns every tenant with a stored weight or jobs, in tenant order. It reads
// pronto_jobs_tenant_state whole: meant for operators and dashboards.
func (s *Store) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	infos, err := s.tenantInfos(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return infos, nil
}
