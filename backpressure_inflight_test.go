package pronto_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// heldInserts is a store whose insert of a batch holding the job of args held stops in the store,
// its job not yet written, until release is closed; entered is closed once it has stopped.
type heldInserts struct {
	store.Store
	held             string // a job's encoded args
	entered, release chan struct{}
}

func (s *heldInserts) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	for _, p := range ps {
		if string(p.Args) == s.held {
			close(s.entered)
			<-s.release
			break
		}
	}
	return s.Store.Insert(ctx, ps)
}

func (s *heldInserts) SetQueueMaxDepth(ctx context.Context, q string, n int64) error {
	return s.Store.(store.QueueBounder).SetQueueMaxDepth(ctx, q, n)
}

func (s *heldInserts) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	return s.Store.(store.QueueBounder).QueueMaxDepths(ctx)
}

func (s *heldInserts) QueueDepths(ctx context.Context, qs []string) (map[string]int64, error) {
	return s.Store.(store.QueueBounder).QueueDepths(ctx, qs)
}

// TestQueueDepthCountsInsertsInFlight: one client never takes a bounded queue beyond its bound,
// however its inserts overlap. A depth read while one of the client's own inserts is still being
// written does not see that insert's jobs; the client adds them to the read, or the inserts admitted
// on that read overshoot the bound by them once the slow one lands. Every insert here rereads the
// depth; on every store.
func TestQueueDepthCountsInsertsInFlight(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		held, err := json.Marshal([]bpArgs{{N: 1}}) // args are an array of one element
		require.NoError(t, err)
		hs := &heldInserts{Store: ts.Store, held: string(held), entered: make(chan struct{}), release: make(chan struct{})}
		t.Cleanup(func() { // a failed assertion leaves the held insert waiting
			select {
			case <-hs.release:
			default:
				close(hs.release)
			}
		})
		c := boundedClient(t, hs, 4)
		pronto.SetQueueDepthRecount(c, time.Nanosecond)
		batch := func(n int) []pronto.InsertManyParams { // two jobs: InsertMany goes to the store as it is
			return []pronto.InsertManyParams{
				{Args: bpArgs{N: n}, Opts: &pronto.InsertOpts{Queue: "bq"}},
				{Args: bpArgs{N: n * 10}, Opts: &pronto.InsertOpts{Queue: "bq"}},
			}
		}

		slow := make(chan error, 1)
		go func() {
			_, err := c.InsertMany(ctx, batch(1))
			slow <- err
		}()
		select {
		case <-hs.entered:
		case err := <-slow:
			t.Fatalf("the insert to hold ended without reaching the store: %v", err)
		}

		_, err = c.InsertMany(ctx, batch(2)) // 2 in flight + 2: the bound, admitted
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, batch(3)) // 2 stored + 2 in flight + 2: beyond it
		require.ErrorIs(t, err, pronto.ErrQueueFull)

		close(hs.release)
		require.NoError(t, <-slow)
		depths, err := ts.Store.(store.QueueBounder).QueueDepths(ctx, []string{"bq"})
		require.NoError(t, err)
		require.LessOrEqual(t, depths["bq"], int64(4), "jobs that have not finished in queue bq, bounded to 4")
	})
}

// TestQueueDepthInFlightLands: every way an insert into a bounded queue ends takes its jobs out of
// the client's count of jobs in flight (a limited tenant's too), or the queue would be counted
// fuller at every later read and stay full: stored (Insert, InsertMany, InsertManyFast), duplicates, a unique conflict, a
// refusal by a tenant limit or by the bound, a failed insert; on every store.
func TestQueueDepthInFlightLands(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := boundedClient(t, ts.Store, 14)
		fs := &failingInserts{Store: ts.Store, qb: ts.Store.(store.QueueBounder)}
		cf := boundedClient(t, fs, 14) // its store keeps no settings: no tenant limits
		in := func(n int) pronto.InsertManyParams {
			return pronto.InsertManyParams{Args: bpArgs{N: n}, Opts: &pronto.InsertOpts{Queue: "bq"}}
		}
		unique := func(n int, on pronto.UniqueConflict) pronto.InsertManyParams {
			return pronto.InsertManyParams{Args: bpArgs{N: n}, Opts: &pronto.InsertOpts{Queue: "bq", Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: on}}}
		}
		_, err := c.Insert(ctx, bpArgs{N: 1}, &pronto.InsertOpts{Queue: "bq"})
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{in(2), in(3)})
		require.NoError(t, err)
		n, err := c.InsertManyFast(ctx, []pronto.InsertManyParams{in(4), in(5)})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = c.InsertManyFast(ctx, []pronto.InsertManyParams{unique(6, pronto.UniqueIgnore), unique(6, pronto.UniqueIgnore)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{unique(6, pronto.UniqueReject)})
		require.ErrorIs(t, err, pronto.ErrUniqueConflict)

		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 1, EnqueuePeriod: time.Hour}))
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: bpArgs{N: 7}, Opts: &pronto.InsertOpts{Queue: "bq", Tenant: "acme"}},
			{Args: bpArgs{N: 8}, Opts: &pronto.InsertOpts{Queue: "bq", Tenant: "acme"}},
		})
		require.ErrorIs(t, err, pronto.ErrTenantLimit)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "globex", pronto.TenantEnqueueLimits{MaxQueueDepth: 100}))
		globex := pronto.InsertManyParams{Args: bpArgs{N: 13}, Opts: &pronto.InsertOpts{Queue: "bq", Tenant: "globex"}}
		n, err = c.InsertManyFast(ctx, []pronto.InsertManyParams{globex})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{globex, in(14)})
		require.NoError(t, err)
		require.Zero(t, pronto.TenantInFlight(c), "tenants' jobs counted in flight once every insert returned")

		fs.fail.Store(true)
		_, err = cf.InsertMany(ctx, []pronto.InsertManyParams{in(9), in(10)})
		require.ErrorIs(t, err, errStoreDown)
		_, err = cf.InsertManyFast(ctx, []pronto.InsertManyParams{in(11)})
		require.ErrorIs(t, err, errStoreDown)
		_, err = cf.Insert(ctx, bpArgs{N: 12}, &pronto.InsertOpts{Queue: "bq"})
		require.ErrorIs(t, err, errStoreDown)
		require.Zero(t, pronto.QueueDepthInFlight(cf), "jobs counted in flight once every insert returned")

		many := make([]pronto.InsertManyParams, 15)
		for i := range many {
			many[i] = in(100 + i)
		}
		_, err = c.InsertMany(ctx, many)
		require.ErrorIs(t, err, pronto.ErrQueueFull)

		require.Zero(t, pronto.QueueDepthInFlight(c), "jobs counted in flight once every insert returned")
	})
}
