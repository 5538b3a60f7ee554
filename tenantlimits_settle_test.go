package pronto_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// cancelledMidWriteStore is a SQLite store whose first insert waits, once started, until its caller
// gives up, then writes all the same and reports the caller's context error: a write the database
// had already taken when the cancel came (docs/architecture.md: "one already in a write may be
// stored, as with any insert cancelled mid-write").
type cancelledMidWriteStore struct {
	*sqlite.Store
	writes chan []*store.InsertParams // the first write, as it starts
	once   sync.Once
}

func (s *cancelledMidWriteStore) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.Store.Insert(ctx, ps)
	}
	s.writes <- ps
	<-ctx.Done()
	if _, err := s.Store.Insert(context.WithoutCancel(ctx), ps); err != nil {
		return nil, err
	}
	return nil, ctx.Err()
}

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sq.Close() })
	require.NoError(t, sq.Migrate(ctx))
	return sq
}

// TestTenantEnqueueRateCountsInsertAbandonedMidWrite: a tenant limited to one insert an hour; its
// caller gives up while the insert's write is in flight, and the write stores the job all the same.
// The stored job is the tenant's one insert of the hour: its next insert is refused, not admitted as
// if nothing was written.
func TestTenantEnqueueRateCountsInsertAbandonedMidWrite(t *testing.T) {
	ctx := context.Background()
	sq := openSQLite(t)
	st := &cancelledMidWriteStore{Store: sq, writes: make(chan []*store.InsertParams, 1)}
	client, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	require.NoError(t, client.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 1, EnqueuePeriod: time.Hour}))

	callerCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	abandoned := make(chan error, 1)
	go func() {
		_, err := client.InsertRaw(callerCtx, []pronto.RawJob{{Kind: "tenant.settle", Args: []byte(`[1]`), Opts: pronto.InsertOpts{Tenant: "acme"}}})
		abandoned <- err
	}()
	ps := <-st.writes
	require.Len(t, ps, 1)
	giveUp() // the caller gives up while its write is in flight
	require.ErrorIs(t, <-abandoned, context.Canceled)
	_, err = sq.GetJob(ctx, ps[0].ID)
	require.NoError(t, err, "the abandoned insert's job is stored")

	// The store takes the next insert: only acme's rate can refuse it.
	_, err = client.InsertRaw(ctx, []pronto.RawJob{{Kind: "tenant.settle", Args: []byte(`[2]`), Opts: pronto.InsertOpts{Tenant: "acme"}}})
	var tle *pronto.TenantLimitError
	require.ErrorAs(t, err, &tle, "acme's one insert of the hour is stored; a second is over the rate")
	require.Equal(t, pronto.TenantLimitEnqueueRate, tle.Limit)
}

// failingInsertStore is a SQLite store whose inserts fail while failing is set, after writing (an
// acknowledgement lost on the way back) or without.
type failingInsertStore struct {
	*sqlite.Store
	failing, write bool
}

func (s *failingInsertStore) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	if !s.failing {
		return s.Store.Insert(ctx, ps)
	}
	if s.write {
		if _, err := s.Store.Insert(ctx, ps); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("connection reset by peer")
}

// TestTenantEnqueueRateAfterFailedInsert: an insert that fails uses up the tenant's enqueue rate
// exactly when the store holds its job: a failed write that stored nothing is taken back out of the
// rate, one that stored the job despite its error is not.
func TestTenantEnqueueRateAfterFailedInsert(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored bool
	}{
		{"nothing stored", false},
		{"stored despite the error", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := &failingInsertStore{Store: openSQLite(t), failing: true, write: tc.stored}
			client, err := pronto.NewClient(st, nil)
			require.NoError(t, err)
			require.NoError(t, client.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{EnqueueRate: 1, EnqueuePeriod: time.Hour}))
			insert := func(n int) error {
				_, err := client.InsertRaw(ctx, []pronto.RawJob{{Kind: "tenant.settle", Args: []byte(fmt.Sprintf("[%d]", n)), Opts: pronto.InsertOpts{Tenant: "acme"}}})
				return err
			}
			err = insert(1)
			require.Error(t, err)
			require.NotErrorIs(t, err, pronto.ErrTenantLimit)

			st.failing = false // the store takes the next insert: only acme's rate can refuse it
			err = insert(2)
			if tc.stored {
				require.ErrorIs(t, err, pronto.ErrTenantLimit, "the failed insert's job is stored: it is acme's one insert of the hour")
			} else {
				require.NoError(t, err, "the failed insert stored nothing: acme's rate is untouched")
			}
		})
	}
}
