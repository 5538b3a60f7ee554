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

// tenantStore is what a client needs of its store for tenants' enqueue limits.
type tenantStore interface {
	store.Store
	store.SettingStore
	store.TenantStore
}

// heldTenantInserts is heldInserts for a client with tenants' enqueue limits.
type heldTenantInserts struct {
	tenantStore
	held             string
	entered, release chan struct{}
}

func (s *heldTenantInserts) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	for _, p := range ps {
		if string(p.Args) == s.held {
			close(s.entered)
			<-s.release
			break
		}
	}
	return s.tenantStore.Insert(ctx, ps)
}

// TestTenantCountsInsertsInFlight: one client never takes a tenant beyond its MaxQueueDepth, however
// its inserts overlap: as for a queue's bound (TestQueueDepthCountsInsertsInFlight), a recount of the
// tenant's jobs while one of the client's inserts is being written adds that insert's jobs. Every
// insert here recounts; on every store.
func TestTenantCountsInsertsInFlight(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		held, err := json.Marshal([]bpArgs{{N: 1}})
		require.NoError(t, err)
		hs := &heldTenantInserts{tenantStore: ts.Store.(tenantStore), held: string(held), entered: make(chan struct{}), release: make(chan struct{})}
		t.Cleanup(func() {
			select {
			case <-hs.release:
			default:
				close(hs.release)
			}
		})
		c, err := pronto.NewClient(hs, nil)
		require.NoError(t, err)
		pronto.SetTenantCountRecount(c, time.Nanosecond)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 4}))
		batch := func(n int) []pronto.InsertManyParams {
			return []pronto.InsertManyParams{
				{Args: bpArgs{N: n}, Opts: &pronto.InsertOpts{Tenant: "acme"}},
				{Args: bpArgs{N: n * 10}, Opts: &pronto.InsertOpts{Tenant: "acme"}},
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

		_, err = c.InsertMany(ctx, batch(2))
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, batch(3))
		require.ErrorIs(t, err, pronto.ErrTenantLimit)

		close(hs.release)
		require.NoError(t, <-slow)
		info, err := ts.Store.(store.TenantStore).GetTenant(ctx, "acme")
		require.NoError(t, err)
		require.LessOrEqual(t, info.Counts[store.StateAvailable], int64(4), "waiting jobs of tenant acme, limited to 4")
	})
}

// failedLookupStore is a store whose insert of the job of args held fails without storing it, and
// whose look-up of that job, which tells the client the store did not keep it, waits for release
// (entered is closed once it waits).
type failedLookupStore struct {
	tenantStore
	held             string
	id               chan string // the held job's id, once its insert failed
	entered, release chan struct{}
}

func (s *failedLookupStore) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	for _, p := range ps {
		if string(p.Args) == s.held {
			s.id <- p.ID
			return nil, errStoreDown
		}
	}
	return s.tenantStore.Insert(ctx, ps)
}

func (s *failedLookupStore) GetJob(ctx context.Context, id string) (*store.Job, error) {
	select {
	case held := <-s.id:
		if held == id {
			close(s.entered)
			<-s.release
		}
	default:
	}
	return s.tenantStore.GetJob(ctx, id)
}

// TestTenantRefundAfterRecount: a job whose insert failed is taken back out of the tenant's count
// that held it, not out of a recount made since, which never held it: that took one job too many out
// and let the tenant go beyond its MaxQueueDepth. Here the recount comes while the client looks the
// failed job up (it cannot tell whether the store kept it); on every store.
func TestTenantRefundAfterRecount(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		held, err := json.Marshal([]bpArgs{{N: 1}})
		require.NoError(t, err)
		fs := &failedLookupStore{tenantStore: ts.Store.(tenantStore), held: string(held), id: make(chan string, 1),
			entered: make(chan struct{}), release: make(chan struct{})}
		t.Cleanup(func() {
			select {
			case <-fs.release:
			default:
				close(fs.release)
			}
		})
		c, err := pronto.NewClient(fs, nil)
		require.NoError(t, err)
		pronto.SetTenantCountRecount(c, time.Nanosecond)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 2}))
		acme := func(n int) []pronto.InsertManyParams { // InsertMany: the store's insert as it is
			return []pronto.InsertManyParams{{Args: bpArgs{N: n}, Opts: &pronto.InsertOpts{Tenant: "acme"}}}
		}
		_, err = c.InsertMany(ctx, acme(5))
		require.NoError(t, err)

		failed := make(chan error, 1)
		go func() {
			_, err := c.InsertMany(ctx, acme(1)) // counted (2 of 2), fails, looked up
			failed <- err
		}()
		select {
		case <-fs.entered:
		case err := <-failed:
			t.Fatalf("the failed insert ended before its look-up: %v", err)
		}
		_, err = c.InsertMany(ctx, acme(6)) // recounted: 1 stored + 1
		require.NoError(t, err)
		pronto.SetTenantCountRecount(c, time.Hour) // from now on the client's own count decides
		close(fs.release)
		require.ErrorIs(t, <-failed, errStoreDown)

		_, err = c.InsertMany(ctx, acme(7))
		require.ErrorIs(t, err, pronto.ErrTenantLimit, "2 jobs of acme waiting, limited to 2")
	})
}
