package pronto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// boundedClient returns a client over s whose queue "bq" is bounded to maxDepth and whose counts
// are never reread while a test runs, so what it counts for its own inserts is all the test sees.
func boundedClient(t *testing.T, s store.Store, maxDepth int64) *pronto.Client {
	t.Helper()
	c, err := pronto.NewClient(s, nil)
	require.NoError(t, err)
	pronto.SetQueueDepthRecount(c, time.Hour)
	require.NoError(t, c.QueueSetMaxDepth(context.Background(), "bq", maxDepth))
	return c
}

// requireRoomFor fails unless exactly room more jobs fit into queue "bq" of c: room inserts
// succeed and the next is refused with the queue's bound as its depth.
func requireRoomFor(t *testing.T, c *pronto.Client, room int, maxDepth int64) {
	t.Helper()
	ctx := context.Background()
	for i := range room {
		_, err := c.Insert(ctx, bpArgs{N: 1000 + i}, &pronto.InsertOpts{Queue: "bq"})
		require.NoError(t, err, "insert %d of the %d that should fit", i+1, room)
	}
	_, err := c.Insert(ctx, bpArgs{N: 2000}, &pronto.InsertOpts{Queue: "bq"})
	var qf *pronto.QueueFullError
	require.ErrorAs(t, err, &qf)
	require.Equal(t, pronto.QueueFullError{Queue: "bq", Depth: maxDepth, MaxDepth: maxDepth, Adding: 1}, *qf)
}

// TestQueueDepthCountsOnlyStoredJobs: an insert that stores nothing leaves room in a bounded queue,
// whatever kept it out: a unique duplicate (ConflictIgnore, in an insert or an InsertManyFast
// batch), a unique conflict (ConflictReject), or a tenant's enqueue limit. The bound counts the jobs
// that have not finished, and these never existed; on every store.
func TestQueueDepthCountsOnlyStoredJobs(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := boundedClient(t, ts.Store, 4)
		unique := func(on pronto.UniqueConflict) *pronto.InsertOpts {
			return &pronto.InsertOpts{Queue: "bq", Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: on}}
		}
		_, err := c.Insert(ctx, bpArgs{N: 1}, unique(pronto.UniqueReject))
		require.NoError(t, err)

		j, err := c.Insert(ctx, bpArgs{N: 1}, unique(pronto.UniqueIgnore))
		require.NoError(t, err)
		require.True(t, j.Duplicate)
		_, err = c.Insert(ctx, bpArgs{N: 1}, unique(pronto.UniqueReject))
		require.ErrorIs(t, err, pronto.ErrUniqueConflict)
		n, err := c.InsertManyFast(ctx, []pronto.InsertManyParams{
			{Args: bpArgs{N: 1}, Opts: unique(pronto.UniqueIgnore)},
			{Args: bpArgs{N: 1}, Opts: unique(pronto.UniqueIgnore)},
		})
		require.NoError(t, err)
		require.Zero(t, n)

		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 1, EnqueuePeriod: time.Hour}))
		_, err = c.Insert(ctx, bpArgs{N: 2}, &pronto.InsertOpts{Queue: "bq", Tenant: "acme"})
		require.NoError(t, err)
		_, err = c.Insert(ctx, bpArgs{N: 3}, &pronto.InsertOpts{Queue: "bq", Tenant: "acme"})
		require.ErrorIs(t, err, pronto.ErrTenantLimit)

		// Two jobs stored, bound 4: two more fit, no third.
		requireRoomFor(t, c, 2, 4)
	})
}

// failingInserts is a store whose inserts fail while fail is set, as a store that is down does.
type failingInserts struct {
	store.Store
	qb   store.QueueBounder
	fail atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *failingInserts) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	if s.fail.Load() {
		return nil, errStoreDown
	}
	return s.Store.Insert(ctx, ps)
}

func (s *failingInserts) SetQueueMaxDepth(ctx context.Context, q string, n int64) error {
	return s.qb.SetQueueMaxDepth(ctx, q, n)
}

func (s *failingInserts) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	return s.qb.QueueMaxDepths(ctx)
}

func (s *failingInserts) QueueDepths(ctx context.Context, qs []string) (map[string]int64, error) {
	return s.qb.QueueDepths(ctx, qs)
}

// TestQueueDepthAfterFailedInsert: an insert that fails in the store does not use up a bounded
// queue's room. The store may or may not have kept such a batch, so the client reads the queue's
// depth again at its next insert into it, and the bound goes by what the store holds; on every store.
func TestQueueDepthAfterFailedInsert(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		fs := &failingInserts{Store: ts.Store, qb: ts.Store.(store.QueueBounder)}
		c := boundedClient(t, fs, 3)
		_, err := c.Insert(ctx, bpArgs{N: 1}, &pronto.InsertOpts{Queue: "bq"})
		require.NoError(t, err)

		fs.fail.Store(true)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: bpArgs{N: 2}, Opts: &pronto.InsertOpts{Queue: "bq"}},
			{Args: bpArgs{N: 3}, Opts: &pronto.InsertOpts{Queue: "bq"}},
		})
		require.ErrorIs(t, err, errStoreDown)
		_, err = c.InsertManyFast(ctx, []pronto.InsertManyParams{{Args: bpArgs{N: 4}, Opts: &pronto.InsertOpts{Queue: "bq"}}})
		require.ErrorIs(t, err, errStoreDown)
		fs.fail.Store(false)

		requireRoomFor(t, c, 2, 3)
	})
}
