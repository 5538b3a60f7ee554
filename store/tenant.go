package store

import (
	"context"
	"strings"
	"time"
)

// Tenants (ojs-multi-tenancy.md, ojs-fair-scheduling.md §9). A job's Tenant is its fairness key:
// Claim takes a queue's jobs in turns across its tenants (see Store.Claim). Beyond that:
//
//   - Weight: a tenant with weight w gets w turns per round of a queue's rotation (one job each),
//     the others their own weight (1 unless stored). A turn that finds the tenant without a
//     claimable job ends its share of the round.
//   - Limit: the RateLimit stored under TenantLimitKey(tenant) (the rate-limit machinery: SetRateLimit
//     and friends) bounds every job of the tenant a claim starts, across every queue: MaxActive
//     counts the tenant's active jobs in all queues, Rate its claims per window. A tenant at its
//     limit is passed over (OnLimit is always wait for a tenant: its jobs stay available). A job of
//     the tenant that also carries a RateKey starts only when both limits have room, and counts
//     against both. GetRateLimit and ListRateLimits report, for a tenant's limit key, the tenant's
//     jobs (active, and waiting: available or due), not the jobs whose RateKey is that key.
//   - Stats: per-tenant job counts by state, across queues.

// DefaultTenantWeight is the weight of a tenant without a stored one.
const DefaultTenantWeight = 1

// MaxTenantWeight bounds a stored weight, so one round of a rotation stays short.
const MaxTenantWeight = 1000

// TenantLimitKey returns the rate key under which tenant's limit is stored.
func TenantLimitKey(tenant string) string { return tenantLimitPrefix + tenant }

const tenantLimitPrefix = "tenant:"

// TenantOfLimitKey returns the tenant whose limit key is key, and whether key is a tenant's limit key
// (TenantLimitKey): such a key's use is the tenant's jobs.
func TenantOfLimitKey(key string) (string, bool) { return strings.CutPrefix(key, tenantLimitPrefix) }

// TenantInfo is what a store knows of one tenant: its stored weight and its jobs.
type TenantInfo struct {
	// Tenant is the tenant's id.
	Tenant string
	// Weight is the tenant's weight: the stored one, else DefaultTenantWeight.
	Weight int
	// Configured reports whether a weight is stored for the tenant.
	Configured bool
	// Counts holds the tenant's jobs per state, across queues (states without jobs are absent).
	Counts map[State]int64
	// UpdatedAt is when the weight was last stored (zero when none is).
	UpdatedAt time.Time
}

// TenantStore is implemented by stores that keep tenant weights and per-tenant counts (all of
// pronto's stores). It is separate from Store so that a third-party store without it keeps working:
// its tenants then all weigh DefaultTenantWeight and have no stats.
type TenantStore interface {
	// SetTenantWeight stores tenant's weight (1 to MaxTenantWeight). Claims honour it from the next
	// one on, in every client.
	SetTenantWeight(ctx context.Context, tenant string, weight int) error
	// DeleteTenantWeight forgets tenant's stored weight (it weighs DefaultTenantWeight again). An
	// error matching ErrNotFound when none is stored.
	DeleteTenantWeight(ctx context.Context, tenant string) error
	// GetTenant returns what the store knows of tenant, or an error matching ErrNotFound when it has
	// neither a stored weight nor jobs.
	GetTenant(ctx context.Context, tenant string) (*TenantInfo, error)
	// ListTenants returns every tenant with a stored weight or with jobs, in tenant order. It counts
	// jobs, so it is meant for operators and dashboards.
	ListTenants(ctx context.Context) ([]*TenantInfo, error)
}
