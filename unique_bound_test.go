package pronto_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// boundArgs is a kind unique by its account.
type boundArgs struct {
	Account string `json:"account_id"`
}

func (boundArgs) Kind() string { return "bound.unique" }

// uniqueAt returns options of a job of queue (default when empty) and tenant, unique by account,
// with the conflict policy on.
func uniqueAt(queue, tenant string, on pronto.UniqueConflict) *pronto.InsertOpts {
	return &pronto.InsertOpts{Queue: queue, Tenant: tenant, Unique: &pronto.UniqueOpts{ArgsKeys: []string{"account_id"}, OnConflict: on}}
}

// TestUniqueDuplicateTakesNoQueueRoom: docs/http-api.md "Backpressure": an enqueue that stores
// nothing takes no room. A queue at its bound (max depth 1, holding one unique job) still answers a
// re-insert of that job as a store would: the holder, Duplicate, under ignore; ErrUniqueConflict under
// reject; 0 stored for an InsertManyFast of duplicates only. A job that would be stored is refused
// all the same.
func TestUniqueDuplicateTakesNoQueueRoom(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", 1))
		ignore := uniqueAt("bq", "", pronto.UniqueIgnore)
		first, err := c.Insert(ctx, boundArgs{Account: "a"}, ignore)
		require.NoError(t, err)

		again, err := c.Insert(ctx, boundArgs{Account: "a"}, ignore)
		require.NoError(t, err, "a duplicate under ignore stores nothing, so takes no room")
		require.True(t, again.Duplicate)
		require.Equal(t, first.ID, again.ID)

		_, err = c.Insert(ctx, boundArgs{Account: "a"}, uniqueAt("bq", "", pronto.UniqueReject))
		require.ErrorIs(t, err, pronto.ErrUniqueConflict, "a duplicate under reject gets its conflict")
		require.NotErrorIs(t, err, pronto.ErrQueueFull)

		n, err := c.InsertManyFast(ctx, []pronto.InsertManyParams{
			{Args: boundArgs{Account: "a"}, Opts: ignore}, {Args: boundArgs{Account: "a"}, Opts: ignore},
		})
		require.NoError(t, err)
		require.Equal(t, 0, n)

		// The bound still holds for what would be stored: a new key, a plain job, a batch holding a
		// duplicate and a new job.
		_, err = c.Insert(ctx, boundArgs{Account: "b"}, ignore)
		require.ErrorIs(t, err, pronto.ErrQueueFull)
		_, err = c.Insert(ctx, boundArgs{Account: "c"}, &pronto.InsertOpts{Queue: "bq"})
		require.ErrorIs(t, err, pronto.ErrQueueFull)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: boundArgs{Account: "a"}, Opts: ignore}, {Args: boundArgs{Account: "d"}, Opts: ignore},
		})
		var qf *pronto.QueueFullError
		require.ErrorAs(t, err, &qf)
		require.Equal(t, 1, qf.Adding, "the duplicate is left out of the count")
	})
}

// TestUniqueDuplicateLeftOutOfQueueCount: a duplicate let past a full queue is not counted, and one
// whose key's holder moved on before the store saw it, so that it was stored after all, is: the
// client's count of the queue stays what the store holds (never reread here).
func TestUniqueDuplicateLeftOutOfQueueCount(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var cancelHolder atomic.Pointer[string] // the job the middleware cancels before the store insert
		var c *pronto.Client
		c, err := pronto.NewClient(ts.Store, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
			func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
				if id := cancelHolder.Swap(nil); id != nil {
					if _, err := c.JobCancel(ctx, *id); err != nil {
						return nil, err
					}
				}
				return next(ctx, ps)
			},
		}})
		require.NoError(t, err)
		pronto.SetQueueDepthRecount(c, time.Hour)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", 2))
		ignore := uniqueAt("bq", "", pronto.UniqueIgnore)

		holder, err := c.Insert(ctx, boundArgs{Account: "a"}, ignore)
		require.NoError(t, err)
		_, err = c.Insert(ctx, bpArgs{N: 1}, &pronto.InsertOpts{Queue: "bq"})
		require.NoError(t, err)
		// Full (2 of 2): the duplicate passes, and is not counted.
		dup, err := c.Insert(ctx, boundArgs{Account: "a"}, ignore)
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", 3))
		requireRoomFor(t, c, 1, 3)

		// Full (3 of 3): the key is held when looked up, but its holder is cancelled before the
		// insert reaches the store, which stores the job: it counts (3 counted, plus it).
		cancelHolder.Store(&holder.ID)
		stored, err := c.Insert(ctx, boundArgs{Account: "a"}, ignore)
		require.NoError(t, err)
		require.False(t, stored.Duplicate)
		require.NotEqual(t, holder.ID, stored.ID)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bq", 5))
		requireRoomFor(t, c, 1, 5)
	})
}

// TestUniqueDuplicateTakesNoTenantRoom: the same for a tenant's enqueue limits: a duplicate stores
// nothing, so neither the tenant's waiting jobs (MaxQueueDepth), nor its scheduled jobs
// (MaxScheduled), nor its enqueue rate (EnqueueRate) refuse it; what would be stored still is.
func TestUniqueDuplicateTakesNoTenantRoom(t *testing.T) {
	later := func(o *pronto.InsertOpts) *pronto.InsertOpts { o.Delay = time.Hour; return o }
	for _, tc := range []struct {
		name   string
		limits pronto.TenantEnqueueLimits
		opts   func(o *pronto.InsertOpts) *pronto.InsertOpts
		limit  string
	}{
		{"MaxQueueDepth", pronto.TenantEnqueueLimits{MaxQueueDepth: 1}, nil, pronto.TenantLimitQueueDepth},
		{"MaxScheduled", pronto.TenantEnqueueLimits{MaxScheduled: 1}, later, pronto.TenantLimitScheduled},
		{"EnqueueRate", pronto.TenantEnqueueLimits{EnqueueRate: 1, EnqueuePeriod: time.Hour}, nil, pronto.TenantLimitEnqueueRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
				ctx := context.Background()
				c, err := pronto.NewClient(ts.Store, &pronto.Config{})
				require.NoError(t, err)
				require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", tc.limits))
				opts := func(on pronto.UniqueConflict) *pronto.InsertOpts {
					o := uniqueAt("", "acme", on)
					if tc.opts != nil {
						o = tc.opts(o)
					}
					return o
				}
				first, err := c.Insert(ctx, boundArgs{Account: "a"}, opts(pronto.UniqueIgnore))
				require.NoError(t, err)

				again, err := c.Insert(ctx, boundArgs{Account: "a"}, opts(pronto.UniqueIgnore))
				require.NoError(t, err, "a duplicate under ignore stores nothing, so takes no room")
				require.True(t, again.Duplicate)
				require.Equal(t, first.ID, again.ID)
				_, err = c.Insert(ctx, boundArgs{Account: "a"}, opts(pronto.UniqueReject))
				require.ErrorIs(t, err, pronto.ErrUniqueConflict)
				n, err := c.InsertManyFast(ctx, []pronto.InsertManyParams{{Args: boundArgs{Account: "a"}, Opts: opts(pronto.UniqueIgnore)}})
				require.NoError(t, err)
				require.Equal(t, 0, n)

				_, err = c.Insert(ctx, boundArgs{Account: "b"}, opts(pronto.UniqueIgnore))
				var tl *pronto.TenantLimitError
				require.ErrorAs(t, err, &tl, "a new key is stored, so the limit refuses it")
				require.Equal(t, tc.limit, tl.Limit)
				require.Equal(t, int64(1), tl.Current, "the duplicates were not counted")
			})
		})
	}
}
