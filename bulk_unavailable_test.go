package pronto_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// downAfterStore is a memory store whose CancelJob fails as a closed store does after ok calls.
type downAfterStore struct {
	*memory.Store
	ok, calls int
}

func (s *downAfterStore) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	s.calls++
	if s.calls > s.ok {
		return nil, store.ErrClosed
	}
	return s.Store.CancelJob(ctx, id)
}

// TestBulkStopsWhenStoreUnreachable: a bulk operation stops at the first job the store cannot be
// reached for, returning the outcomes so far and the error, instead of trying every id against a
// store that is down (each maybe waiting out a connection timeout).
func TestBulkStopsWhenStoreUnreachable(t *testing.T) {
	ctx := context.Background()
	s := &downAfterStore{Store: memory.New(), ok: 2}
	t.Cleanup(func() { _ = s.Close() })
	c, err := pronto.NewClient(s, nil)
	require.NoError(t, err)
	var ids []string
	for i := range 5 {
		j, err := c.Insert(ctx, tenantArgs{N: i}, nil)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	res, err := c.JobCancelMany(ctx, ids)
	require.ErrorIs(t, err, store.ErrClosed)
	require.True(t, store.IsUnavailable(s, err))
	require.Len(t, res, 2, "the outcomes before the store went down")
	for _, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, pronto.StateCancelled, r.Job.State)
	}
	require.Equal(t, 3, s.calls, "the store is tried once after it went down, not once per remaining id")
}
