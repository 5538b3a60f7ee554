package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// TestJobSetPriority: JobSetPriority changes a waiting job's priority, answers the one it had,
// tells subscribers (priority.changed) and stores the value as given, without a tenant's boost; it
// refuses bad input, unknown jobs and jobs no longer waiting.
func TestJobSetPriority(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		events, unsub := c.Subscribe(pronto.EventPriorityChanged)
		defer unsub()

		require.NoError(t, c.TenantSetPriorityBoost(ctx, "gold", 10))
		j, err := c.Insert(ctx, tenantArgs{N: 1}, &pronto.InsertOpts{Queue: "prio", Tenant: "gold"})
		require.NoError(t, err)
		require.Equal(t, 10, j.Priority, "boosted at insert")

		got, prev, err := c.JobSetPriority(ctx, j.ID, pronto.PriorityHigh)
		require.NoError(t, err)
		require.Equal(t, 10, prev)
		require.Equal(t, pronto.PriorityHigh, got.Priority, "stored as given: the boost applies at insert only")
		require.Equal(t, pronto.StateAvailable, got.State)
		select {
		case ev := <-events:
			require.Equal(t, pronto.EventPriorityChanged, ev.Kind)
			require.Equal(t, j.ID, ev.Job.ID)
			require.Equal(t, pronto.PriorityHigh, ev.Job.Priority)
			require.Equal(t, 10, ev.PreviousPriority)
		case <-time.After(10 * time.Second):
			t.Fatal("no priority.changed event")
		}
		row, err := c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.PriorityHigh, row.Priority)

		for _, bad := range []int{pronto.PriorityMin - 1, pronto.PriorityMax + 1} {
			_, _, err := c.JobSetPriority(ctx, j.ID, bad)
			require.ErrorIs(t, err, pronto.ErrInvalidArgs)
			require.ErrorContains(t, err, "between -100 and 100")
		}
		_, _, err = c.JobSetPriority(ctx, "not-a-uuid", 1)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		_, _, err = c.JobSetPriority(ctx, uuidv7.New(), 1)
		require.ErrorIs(t, err, pronto.ErrNotFound)

		_, err = c.JobCancel(ctx, j.ID)
		require.NoError(t, err)
		_, _, err = c.JobSetPriority(ctx, j.ID, 1)
		require.ErrorIs(t, err, pronto.ErrInvalidTransition)
		require.ErrorContains(t, err, "cancelled")
		row, err = c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.PriorityHigh, row.Priority, "a refused change writes nothing")
	})
}
