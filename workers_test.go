package pronto_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestWorkerRecords: WorkerList and WorkerDirect read and direct the OJS workers the servers
// recorded; on every store.
func TestWorkerRecords(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		ws := ts.Store.(store.WorkerStore)
		_, err = ws.TouchWorker(ctx, "ojs-worker-1", []string{"email"})
		require.NoError(t, err)
		list, err := c.WorkerList(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, "ojs-worker-1", list[0].ID)
		require.Equal(t, []string{"email"}, list[0].Queues)

		require.NoError(t, c.WorkerDirect(ctx, "ojs-worker-1", store.WorkerQuiet))
		d, err := ws.TouchWorker(ctx, "ojs-worker-1", nil)
		require.NoError(t, err)
		require.Equal(t, store.WorkerQuiet, d, "the next heartbeat answers the directive")
		require.NoError(t, c.WorkerDirect(ctx, "ojs-worker-1", ""))
		require.ErrorIs(t, c.WorkerDirect(ctx, "nobody", store.WorkerQuiet), pronto.ErrNotFound)
		err = c.WorkerDirect(ctx, "ojs-worker-1", "pause")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.False(t, errors.Is(err, pronto.ErrNotFound))
	})
}
