package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.TenantStore = (*Store)(nil)

// Tenant weights live in {schema}.tenants (migration 011); a tenant's counts come from
// jobs_tenant_state_idx, which only jobs with a tenant enter. The statements are not prepared:
// they serve operators and dashboards, never a claim.

// SetTenantWeight stores tenant's weight; claims honour it from the next one on.
func (s *Store) SetTenantWeight(ctx context.Context, tenant string, weight int) error {
	if tenant == "" || weight < 1 || weight > store.MaxTenantWeight {
		return fmt.Errorf("set tenant weight %q to %d (want a tenant and 1 to %d): %w",
			tenant, weight, store.MaxTenantWeight, store.ErrInvalidParams)
	}
	_, err := s.pool.Exec(ctx, s.expand.Replace(`INSERT INTO {schema}.tenants (tenant, weight) VALUES ($1, $2)
ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight, updated_at = now()`), tenant, weight)
	if err != nil {
		return fmt.Errorf("set tenant weight %q: %w", tenant, err)
	}
	return nil
}

// DeleteTenantWeight forgets tenant's stored weight.
func (s *Store) DeleteTenantWeight(ctx context.Context, tenant string) error {
	tag, err := s.pool.Exec(ctx, s.expand.Replace(`DELETE FROM {schema}.tenants WHERE tenant = $1`), tenant)
	if err != nil {
		return fmt.Errorf("delete tenant weight %q: %w", tenant, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("tenant %q has no stored weight: %w", tenant, store.ErrNotFound)
	}
	return nil
}

// sqlTenants returns, for the tenants $1 (NULL for all), one row per tenant and state of its jobs
// (state NULL for a tenant with a weight and no jobs) with the tenant's stored weight.
const sqlTenants = `WITH c AS (
	SELECT tenant, state, count(*) AS n FROM {schema}.jobs
	WHERE tenant IS NOT NULL AND ($1::text[] IS NULL OR tenant = ANY ($1))
	GROUP BY tenant, state
)
SELECT coalesce(c.tenant, t.tenant), c.state, coalesce(c.n, 0), t.weight, t.updated_at
FROM c FULL JOIN (SELECT * FROM {schema}.tenants WHERE $1::text[] IS NULL OR tenant = ANY ($1)) t
	ON t.tenant = c.tenant
ORDER BY 1`

// tenantInfos runs sqlTenants for only (nil for every tenant).
func (s *Store) tenantInfos(ctx context.Context, only []string) ([]*store.TenantInfo, error) {
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlTenants), only)
	if err != nil {
		return nil, err
	}
	var (
		out     []*store.TenantInfo
		tenant  string
		state   pgtype.Text
		n       int64
		weight  pgtype.Int4
		updated pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&tenant, &state, &n, &weight, &updated}, func() error {
		if len(out) == 0 || out[len(out)-1].Tenant != tenant {
			info := &store.TenantInfo{Tenant: tenant, Weight: store.DefaultTenantWeight, Counts: map[store.State]int64{}}
			if weight.Valid {
				info.Weight, info.Configured, info.UpdatedAt = int(weight.Int32), true, updated.Time
			}
			out = append(out, info)
		}
		if state.Valid && n > 0 {
			out[len(out)-1].Counts[store.State(state.String)] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *store.TenantInfo) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}

// GetTenant returns tenant's weight and its jobs per state across queues.
func (s *Store) GetTenant(ctx context.Context, tenant string) (*store.TenantInfo, error) {
	infos, err := s.tenantInfos(ctx, []string{tenant})
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	return infos[0], nil
}

// ListTenants returns every tenant with a stored weight or jobs, in tenant order. It reads
// jobs_tenant_state_idx whole: meant for operators and dashboards.
func (s *Store) ListTenants(ctx context.Context) ([]*store.TenantInfo, error) {
	infos, err := s.tenantInfos(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return infos, nil
}
