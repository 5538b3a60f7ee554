package pronto_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestTenantLimitAnyValidTenant: any tenant Insert accepts can be given a limit.
func TestTenantLimitAnyValidTenant(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindMemory)
	c, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	for _, tn := range []string{"user@example.com", "org/team", strings.Repeat("t", 255), "_internal"} {
		_, err := c.Insert(ctx, tenantArgs{N: 1}, &pronto.InsertOpts{Tenant: tn})
		require.NoError(t, err, "insert accepts tenant %q", tn)
		require.NoError(t, c.TenantSetLimit(ctx, tn, pronto.RateLimit{MaxActive: 2}), "limit of tenant %q", tn)
		info, err := c.TenantGet(ctx, tn)
		require.NoError(t, err)
		require.NotNil(t, info.Limit, "tenant %q shows its limit", tn)
		require.Equal(t, 2, info.Limit.Limit.MaxActive)
		got, err := c.RateLimitGet(ctx, pronto.TenantLimitKey(tn))
		require.NoError(t, err)
		require.Equal(t, 2, got.Limit.MaxActive)
		require.NoError(t, c.TenantDeleteLimit(ctx, tn))
	}
	// Still refused: a key that is neither a rate key nor a valid tenant's.
	require.ErrorIs(t, c.RateLimitSet(ctx, "tenant:with space", pronto.RateLimit{MaxActive: 1}), pronto.ErrInvalidArgs)
}

// TestTenantEnqueueRateCountsStoredJobsOnly: an insert the store refuses (a unique conflict)
// enqueues nothing, so it must not use up the tenant's enqueue rate.
func TestTenantEnqueueRateCountsStoredJobsOnly(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 2, EnqueuePeriod: time.Hour}))
		uniq := &pronto.InsertOpts{Tenant: "acme", Unique: &pronto.UniqueOpts{ByArgs: true}}
		_, err = c.Insert(ctx, tenantArgs{N: 1}, uniq)
		require.NoError(t, err)
		_, err = c.Insert(ctx, tenantArgs{N: 1}, uniq)
		require.ErrorIs(t, err, pronto.ErrUniqueConflict, "the duplicate is refused by the store")
		// A duplicate met under UniqueIgnore is not inserted either.
		dup, err := c.Insert(ctx, tenantArgs{N: 1}, &pronto.InsertOpts{Tenant: "acme",
			Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}})
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		// One job enqueued of the two allowed this hour: a second, different job is admitted.
		_, err = c.Insert(ctx, tenantArgs{N: 2}, &pronto.InsertOpts{Tenant: "acme"})
		require.NoError(t, err, "only one job of acme was enqueued this hour (rate 2/h)")
		_, err = c.Insert(ctx, tenantArgs{N: 3}, &pronto.InsertOpts{Tenant: "acme"})
		var tle *pronto.TenantLimitError
		require.ErrorAs(t, err, &tle, "the third job is over the rate")
		require.EqualValues(t, 2, tle.Current)
	})
}

// TestWorkflowOneTenant: ojs-multi-tenancy.md §15.2: every job of a workflow has the
// workflow's tenant; a step of another tenant MUST be rejected.
func TestWorkflowOneTenant(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindMemory)
	c, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	w := pronto.NewWorkflow("cross").
		Add("a", tenantArgs{N: 1}, &pronto.InsertOpts{Tenant: "ta"}).
		Add("b", tenantArgs{N: 2}, &pronto.InsertOpts{Tenant: "tb"}, "a")
	_, err = c.WorkflowInsert(ctx, w)
	require.ErrorIs(t, err, pronto.ErrInvalidArgs, "a workflow spanning tenants ta and tb is refused")
	require.ErrorContains(t, err, `step "b": tenant "tb", but step "a" has tenant "ta"`)
	_, err = c.WorkflowInsert(ctx, pronto.NewWorkflow("half").
		Add("a", tenantArgs{N: 1}, nil).
		Add("b", tenantArgs{N: 2}, &pronto.InsertOpts{Tenant: "tb"}, "a"))
	require.ErrorIs(t, err, pronto.ErrInvalidArgs, "a step with a tenant in a workflow without one is refused")
	res, err := c.WorkflowInsert(ctx, pronto.NewWorkflow("one").
		Add("a", tenantArgs{N: 1}, &pronto.InsertOpts{Tenant: "ta"}).
		Add("b", tenantArgs{N: 2}, &pronto.InsertOpts{Tenant: "ta"}, "a"))
	require.NoError(t, err)
	require.Equal(t, "ta", res.Jobs["b"].Tenant)
}
