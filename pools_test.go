package pronto_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestWorkerPools: pools are stored, read back, listed by name, replaced and deleted through the Go
// API, bad ones are refused naming the problem, and a second client sees them; on every store.
func TestWorkerPools(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		list, err := c.PoolList(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		_, err = c.PoolGet(ctx, "critical")
		require.ErrorIs(t, err, pronto.ErrNotFound)

		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "critical", Queues: []string{"critical", "payments"}, Concurrency: 20}))
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "bulk", Queues: []string{"default"}, Strategy: pronto.PoolStrategyStrict}))
		p, err := c.PoolGet(ctx, "critical")
		require.NoError(t, err)
		require.Equal(t, &pronto.WorkerPool{Name: "critical", Queues: []string{"critical", "payments"}, Concurrency: 20, Strategy: pronto.PoolStrategyRoundRobin}, p)

		c2, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		list, err = c2.PoolList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, "bulk", list[0].Name)
		require.Equal(t, "critical", list[1].Name)

		for _, bad := range []pronto.WorkerPool{
			{Name: "Bad Name", Queues: []string{"a"}},
			{Name: "p", Queues: nil},
			{Name: "p", Queues: []string{"a", "a"}},
			{Name: "p", Queues: []string{"Bad!"}},
			{Name: "p", Queues: []string{"a"}, Concurrency: -1},
		} {
			require.ErrorIs(t, c.PoolSet(ctx, bad), pronto.ErrInvalidArgs, "%+v", bad)
		}
		require.ErrorIs(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "p", Queues: []string{"a"}, Strategy: "weighted"}), pronto.ErrUnsupported)

		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "critical", Queues: []string{"critical"}}))
		p, err = c2.PoolGet(ctx, "critical")
		require.NoError(t, err)
		require.Equal(t, []string{"critical"}, p.Queues)
		require.Zero(t, p.Concurrency)

		require.NoError(t, c.PoolDelete(ctx, "critical"))
		require.ErrorIs(t, c.PoolDelete(ctx, "critical"), pronto.ErrNotFound)
		list, err = c.PoolList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
	})
}
