package pronto_test

import (
	"context"
	"testing"
	"time"

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
			{Name: "p", Queues: []string{"a"}, Strategy: "fastest"},
			{Name: "p", Queues: []string{"a"}, Weights: map[string]int{"a": 2}},
			{Name: "p", Queues: []string{"a"}, Strategy: pronto.PoolStrategyWeighted, Weights: map[string]int{"b": 2}},
			{Name: "p", Queues: []string{"a"}, Strategy: pronto.PoolStrategyWeighted, Weights: map[string]int{"a": 0}},
			{Name: "p", Queues: []string{"a"}, Strategy: pronto.PoolStrategyWeighted, Weights: map[string]int{"a": 1001}},
			{Name: "p", Queues: []string{"a"}, StarvationPrevention: &pronto.StarvationPrevention{Enabled: true, MinDispatchRatio: 1.5}},
			{Name: "p", Queues: []string{"a"}, StarvationPrevention: &pronto.StarvationPrevention{Enabled: true, RotationInterval: -time.Second}},
		} {
			require.ErrorIs(t, c.PoolSet(ctx, bad), pronto.ErrInvalidArgs, "%+v", bad)
		}

		// Weights and starvation prevention are stored and read back, with the defaults filled in.
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{
			Name: "w", Queues: []string{"a", "b"}, Strategy: pronto.PoolStrategyWeighted, Weights: map[string]int{"a": 3},
			StarvationPrevention: &pronto.StarvationPrevention{Enabled: true},
		}))
		p, err = c2.PoolGet(ctx, "w")
		require.NoError(t, err)
		require.Equal(t, map[string]int{"a": 3}, p.Weights)
		require.Equal(t, 3, p.Weight("a"))
		require.Equal(t, 1, p.Weight("b"))
		require.Equal(t, &pronto.StarvationPrevention{Enabled: true, RotationInterval: pronto.DefaultRotationInterval, MinDispatchRatio: pronto.DefaultMinDispatchRatio}, p.StarvationPrevention)
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "ll", Queues: []string{"a", "b"}, Strategy: pronto.PoolStrategyLeastLoaded}))
		require.NoError(t, c.PoolDelete(ctx, "w"))
		require.NoError(t, c.PoolDelete(ctx, "ll"))

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

// TestWorkerPoolIsolation: the isolated flag is stored and read back; a queue of an isolated pool can
// be shared with other isolated pools only; IsolatedQueues maps each such queue to its pools. On every
// store.
func TestWorkerPoolIsolation(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "pay", Queues: []string{"payments"}, Isolated: true}))
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "gen", Queues: []string{"default"}}))
		p, err := c.PoolGet(ctx, "pay")
		require.NoError(t, err)
		require.True(t, p.Isolated)

		// A pool that is not isolated cannot take an isolated pool's queue, nor can a pool sharing a
		// queue with one that is not isolated become isolated.
		err = c.PoolSet(ctx, pronto.WorkerPool{Name: "gen", Queues: []string{"default", "payments"}})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.ErrorContains(t, err, `queue "payments" is in isolated pool "pay" and in pool "gen"`)
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "gen", Queues: []string{"default"}, Isolated: true}))
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "gen", Queues: []string{"default"}}))
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "bulk", Queues: []string{"default", "low"}}))
		require.ErrorIs(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "gen", Queues: []string{"default"}, Isolated: true}), pronto.ErrInvalidArgs)

		// Two isolated pools may share a queue: both serve it.
		require.NoError(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "gpu", Queues: []string{"payments", "images"}, Isolated: true}))
		require.ErrorIs(t, c.PoolSet(ctx, pronto.WorkerPool{Name: "pay", Queues: []string{"payments"}}), pronto.ErrInvalidArgs)
		list, err := c.PoolList(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string][]string{"payments": {"gpu", "pay"}, "images": {"gpu"}}, pronto.IsolatedQueues(list))
		require.Nil(t, pronto.IsolatedQueues(nil))
	})
}
