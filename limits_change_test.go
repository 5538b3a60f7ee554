package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestQueueBoundChangeRecountsDepth: a queue bounded again, or whose bound was lowered, is recounted
// at its next insert, whether this client or another changed the bound. The jobs inserted while it
// was unbounded (which no client counts) and those another client inserted count against the new
// bound at once: a depth counted under the earlier bound must not let the new one be met late. The
// depth is never reread on its own meanwhile (SetQueueDepthRecount), so only the change can recount
// it.
func TestQueueBoundChangeRecountsDepth(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		admin, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		newInserter := func(t *testing.T) *pronto.Client {
			c, err := pronto.NewClient(s, nil)
			require.NoError(t, err)
			pronto.SetQueueDepthRecount(c, time.Hour)
			return c
		}
		insert := func(t *testing.T, c *pronto.Client, queue string, n int) {
			t.Helper()
			for i := range n {
				_, err := c.Insert(ctx, bpArgs{N: i}, &pronto.InsertOpts{Queue: queue})
				require.NoError(t, err)
			}
		}
		requireFull := func(t *testing.T, c *pronto.Client, queue string, depth int64) {
			t.Helper()
			_, err := c.Insert(ctx, bpArgs{}, &pronto.InsertOpts{Queue: queue})
			var qf *pronto.QueueFullError
			require.ErrorAs(t, err, &qf, "queue %s holding %d jobs took an insert beyond its bound 5", queue, depth)
			require.Equal(t, pronto.QueueFullError{Queue: queue, Depth: depth, MaxDepth: 5, Adding: 1}, *qf)
		}

		t.Run("bounded again by this client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, c.QueueSetMaxDepth(ctx, "own", 1000))
			insert(t, c, "own", 1)
			require.NoError(t, c.QueueSetMaxDepth(ctx, "own", 0))
			insert(t, c, "own", 20)
			require.NoError(t, c.QueueSetMaxDepth(ctx, "own", 5))
			requireFull(t, c, "own", 21)
		})
		t.Run("bounded again by another client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, admin.QueueSetMaxDepth(ctx, "other", 1000))
			insert(t, c, "other", 1)
			require.NoError(t, admin.QueueSetMaxDepth(ctx, "other", 0))
			pronto.RereadLimits(c)
			insert(t, c, "other", 20)
			require.NoError(t, admin.QueueSetMaxDepth(ctx, "other", 5))
			pronto.RereadLimits(c)
			requireFull(t, c, "other", 21)
		})
		t.Run("bound lowered by another client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, admin.QueueSetMaxDepth(ctx, "lowered", 1000))
			insert(t, c, "lowered", 1)
			insert(t, admin, "lowered", 20)
			require.NoError(t, admin.QueueSetMaxDepth(ctx, "lowered", 5))
			pronto.RereadLimits(c)
			requireFull(t, c, "lowered", 21)
		})
	})
}

// TestTenantLimitChangeRecountsJobs is TestQueueBoundChangeRecountsDepth for a tenant's
// MaxQueueDepth, recounted when the tenant is limited again or its limits change; and a change of
// one limit keeps the enqueue-rate window the client has counted.
func TestTenantLimitChangeRecountsJobs(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		admin, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		newInserter := func(t *testing.T) *pronto.Client {
			c, err := pronto.NewClient(s, nil)
			require.NoError(t, err)
			pronto.SetTenantCountRecount(c, time.Hour)
			return c
		}
		insert := func(t *testing.T, c *pronto.Client, tenant string, n int) {
			t.Helper()
			for i := range n {
				_, err := c.Insert(ctx, tenantArgs{N: i}, &pronto.InsertOpts{Tenant: tenant})
				require.NoError(t, err)
			}
		}
		depth := func(n int64) pronto.TenantEnqueueLimits { return pronto.TenantEnqueueLimits{MaxQueueDepth: n} }
		requireLimited := func(t *testing.T, c *pronto.Client, tenant, limit string, current, maximum int64) {
			t.Helper()
			_, err := c.Insert(ctx, tenantArgs{}, &pronto.InsertOpts{Tenant: tenant})
			var tl *pronto.TenantLimitError
			require.ErrorAs(t, err, &tl, "tenant %s holding %d jobs took an insert beyond its %s %d", tenant, current, limit, maximum)
			require.Equal(t, pronto.TenantLimitError{Tenant: tenant, Limit: limit, Current: current, Maximum: maximum, Adding: 1, RetryAfter: tl.RetryAfter}, *tl)
		}

		t.Run("limited again by this client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, c.TenantSetEnqueueLimits(ctx, "own", depth(1000)))
			insert(t, c, "own", 1)
			require.NoError(t, c.TenantSetEnqueueLimits(ctx, "own", pronto.TenantEnqueueLimits{}))
			insert(t, c, "own", 20)
			require.NoError(t, c.TenantSetEnqueueLimits(ctx, "own", depth(5)))
			requireLimited(t, c, "own", pronto.TenantLimitQueueDepth, 21, 5)
		})
		t.Run("limited again by another client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, admin.TenantSetEnqueueLimits(ctx, "other", depth(1000)))
			insert(t, c, "other", 1)
			require.NoError(t, admin.TenantSetEnqueueLimits(ctx, "other", pronto.TenantEnqueueLimits{}))
			pronto.RereadLimits(c)
			insert(t, c, "other", 20)
			require.NoError(t, admin.TenantSetEnqueueLimits(ctx, "other", depth(5)))
			pronto.RereadLimits(c)
			requireLimited(t, c, "other", pronto.TenantLimitQueueDepth, 21, 5)
		})
		t.Run("limit changed by another client", func(t *testing.T) {
			c := newInserter(t)
			require.NoError(t, admin.TenantSetEnqueueLimits(ctx, "changed", depth(1000)))
			insert(t, c, "changed", 1)
			insert(t, admin, "changed", 20)
			require.NoError(t, admin.TenantSetEnqueueLimits(ctx, "changed", depth(5)))
			pronto.RereadLimits(c)
			requireLimited(t, c, "changed", pronto.TenantLimitQueueDepth, 21, 5)
		})
		t.Run("rate window kept across a change", func(t *testing.T) {
			c := newInserter(t)
			rate := pronto.TenantEnqueueLimits{EnqueueRate: 3, EnqueuePeriod: time.Hour}
			require.NoError(t, c.TenantSetEnqueueLimits(ctx, "rated", rate))
			insert(t, c, "rated", 3)
			rate.MaxQueueDepth = 1000
			require.NoError(t, c.TenantSetEnqueueLimits(ctx, "rated", rate))
			requireLimited(t, c, "rated", pronto.TenantLimitEnqueueRate, 3, 3)
		})
	})
}
