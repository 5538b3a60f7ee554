package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestInsertManyFastDuplicatesUseNoTenantRate: a unique duplicate in an InsertManyFast batch (which
// on PostgreSQL reports only how many jobs it stored) uses up none of its tenant's enqueue rate, as
// a duplicate through Insert does not. Every store: the others take InsertManyFast through InsertMany.
func TestInsertManyFastDuplicatesUseNoTenantRate(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "delta", pronto.TenantEnqueueLimits{EnqueueRate: 3, EnqueuePeriod: time.Hour}))
		unique := func() *pronto.InsertOpts {
			return &pronto.InsertOpts{Tenant: "delta", Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}}
		}
		_, err = c.Insert(ctx, tenantArgs{N: 1}, unique()) // 1 of 3
		require.NoError(t, err)
		n, err := c.InsertManyFast(ctx, []pronto.InsertManyParams{
			{Args: tenantArgs{N: 1}, Opts: unique()}, // the holder's duplicate: not stored
			{Args: tenantArgs{N: 2}, Opts: unique()}, // 2 of 3
		})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = c.Insert(ctx, tenantArgs{N: 3}, &pronto.InsertOpts{Tenant: "delta"}) // 3 of 3
		require.NoError(t, err, "the duplicate the batch did not store was counted against the rate")
		_, err = c.Insert(ctx, tenantArgs{N: 4}, &pronto.InsertOpts{Tenant: "delta"})
		require.ErrorIs(t, err, pronto.ErrTenantLimit, "a fourth job in the hour")
	})
}
