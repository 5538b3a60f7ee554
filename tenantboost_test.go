package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// TestTenantPriorityBoost: a tenant's boost is added to the priority of its jobs as they are inserted
// (every insert path), clamped to the priority range; jobs stored before keep theirs, so the boosted
// ones are claimed first within the tenant; another client sees the boost within about a second; bad
// values are refused; on every store.
func TestTenantPriorityBoost(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		opts := func(tenant string, prio int) *pronto.InsertOpts {
			return &pronto.InsertOpts{Tenant: tenant, Priority: prio, Queue: "boost"}
		}

		for _, bad := range []int{pronto.MaxTenantPriorityBoost + 1, -pronto.MaxTenantPriorityBoost - 1} {
			require.ErrorIs(t, c.TenantSetPriorityBoost(ctx, "gold", bad), pronto.ErrInvalidArgs)
		}
		require.ErrorIs(t, c.TenantSetPriorityBoost(ctx, "bad tenant", 5), pronto.ErrInvalidArgs)
		require.ErrorIs(t, c.TenantDeletePriorityBoost(ctx, "gold"), pronto.ErrNotFound)

		// Before the boost: a gold job keeps its own priority.
		before, err := c.Insert(ctx, tenantArgs{N: 0}, opts("gold", 0))
		require.NoError(t, err)
		require.Equal(t, 0, before.Priority)

		require.NoError(t, c.TenantSetPriorityBoost(ctx, "gold", 10))
		require.NoError(t, c.TenantSetPriorityBoost(ctx, "lead", -30))
		info, err := c.TenantGet(ctx, "lead")
		require.NoError(t, err, "a boost alone makes a tenant known")
		require.Equal(t, -30, info.PriorityBoost)
		boosts, err := c.TenantPriorityBoosts(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"gold": 10, "lead": -30}, boosts)

		// The client that set it applies it at once, on every insert path.
		after, err := c.Insert(ctx, tenantArgs{N: 1}, opts("gold", 0))
		require.NoError(t, err)
		require.Equal(t, 10, after.Priority)
		rows, err := c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: tenantArgs{N: 2}, Opts: opts("gold", 95)},   // clamped to PriorityMax
			{Args: tenantArgs{N: 3}, Opts: opts("lead", -80)},  // clamped to PriorityMin
			{Args: tenantArgs{N: 4}, Opts: opts("", 7)},        // no tenant: unchanged
			{Args: tenantArgs{N: 5}, Opts: opts("plain", -7)},  // a tenant without a boost: unchanged
			{Args: tenantArgs{N: 6}, Opts: opts("lead", 50)},   // lowered
			{Args: tenantArgs{N: 7}, Opts: opts("gold", -100)}, // raised
		})
		require.NoError(t, err)
		got := make([]int, len(rows))
		for i, r := range rows {
			got[i] = r.Priority
		}
		require.Equal(t, []int{pronto.PriorityMax, pronto.PriorityMin, 7, -7, 20, -90}, got)
		raw, err := c.InsertRaw(ctx, []pronto.RawJob{{Kind: "tenant.job", Args: []byte(`[{"n":8}]`), Opts: *opts("gold", 1)}})
		require.NoError(t, err)
		require.Equal(t, 11, raw[0].Priority)
		stored, err := c.JobGet(ctx, after.ID)
		require.NoError(t, err)
		require.Equal(t, 10, stored.Priority, "the boosted priority is the stored one")

		// Within the tenant, the boosted job of priority 0 comes before the unboosted one inserted
		// first with the same priority (the rest of gold's jobs in priority order around them).
		claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "boost", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		var gold []string
		for _, j := range claimed {
			if j.Tenant == "gold" {
				gold = append(gold, j.ID)
			}
		}
		require.Equal(t, []string{rows[0].ID, raw[0].ID, after.ID, before.ID, rows[5].ID}, gold)

		// Another client reads the boosts within about a second (its cache's period).
		other, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetPriorityBoost(ctx, "late", 5))
		require.Eventually(t, func() bool {
			r, err := other.Insert(ctx, tenantArgs{N: 9}, opts("late", 0))
			require.NoError(t, err)
			return r.Priority == 5
		}, 10*time.Second, 100*time.Millisecond)

		// Removed: new jobs keep their own priority again; the boosted ones stay as they are.
		require.NoError(t, c.TenantDeletePriorityBoost(ctx, "gold"))
		plain, err := c.Insert(ctx, tenantArgs{N: 10}, opts("gold", 3))
		require.NoError(t, err)
		require.Equal(t, 3, plain.Priority)
		stored, err = c.JobGet(ctx, after.ID)
		require.NoError(t, err)
		require.Equal(t, 10, stored.Priority)
		_, err = c.TenantGet(ctx, "gold")
		require.NoError(t, err, "gold still has jobs")
		list, err := c.TenantList(ctx)
		require.NoError(t, err)
		for _, ti := range list {
			want := map[string]int{"lead": -30, "late": 5}[ti.Tenant]
			require.Equal(t, want, ti.PriorityBoost, "tenant %s", ti.Tenant)
		}
	})
}

// TestTenantPriorityBoostReads: the boosts cost no round trip per insert: a client reads them at most
// about once a second on inserts with a tenant, and never on inserts without one.
func TestTenantPriorityBoostReads(t *testing.T) {
	ctx := context.Background()
	cs := &countingTenants{Store: newTestStore(t, kindMemory).Store}
	c, err := pronto.NewClient(cs, nil)
	require.NoError(t, err)
	for i := range 200 {
		_, err := c.Insert(ctx, tenantArgs{N: i}, &pronto.InsertOpts{Queue: "plain"})
		require.NoError(t, err)
	}
	require.Zero(t, cs.boostReads.Load(), "inserts without a tenant read no boosts")
	require.NoError(t, c.TenantSetPriorityBoost(ctx, "gold", 1))
	cs.boostReads.Store(0)
	start := time.Now()
	for i := range 500 {
		r, err := c.Insert(ctx, tenantArgs{N: i}, &pronto.InsertOpts{Tenant: "gold"})
		require.NoError(t, err)
		require.Equal(t, 1, r.Priority)
	}
	seconds := int64(time.Since(start)/time.Second) + 1
	require.LessOrEqual(t, cs.boostReads.Load(), seconds+1, "at most one read a second (and the first)")
}

// TestTenantPriorityBoostInsertTx: InsertTx (PostgreSQL) and a workflow's jobs take the boost too.
func TestTenantPriorityBoostInsertTx(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	c, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	require.NoError(t, c.TenantSetPriorityBoost(ctx, "gold", 7))
	tx, err := ts.Store.(*postgres.Store).Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op once committed
	j, err := c.InsertTx(ctx, tx, tenantArgs{N: 1}, &pronto.InsertOpts{Tenant: "gold", Priority: 2})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 9, j.Priority)
	stored, err := c.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, 9, stored.Priority)

	w := pronto.NewWorkflow("boosted").Add("a", tenantArgs{N: 2}, &pronto.InsertOpts{Tenant: "gold"})
	res, err := c.WorkflowInsert(ctx, w)
	require.NoError(t, err)
	require.Equal(t, 7, res.Jobs["a"].Priority)
}
