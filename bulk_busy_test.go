package pronto_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestBulkGoesOnPastOneLockedRow: a bulk cancel meets one job whose row another session holds past
// lock_timeout. That job fails alone (a lock timeout is its row's, not an outage) and the others are
// cancelled; it used to stop the whole operation as if the database were down. A table locked whole
// (a migration's lock) still stops it, after three jobs in a row.
func TestBulkGoesOnPastOneLockedRow(t *testing.T) {
	ctx := context.Background()
	st, schema := lockTimeoutStore(t)
	c, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	var ids []string
	for range 7 {
		j, err := c.Insert(ctx, isolationArgs{}, &pronto.InsertOpts{Queue: "bulkbusy"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}

	unlock := lockJobRow(t, schema, ids[1])
	res, err := c.JobCancelMany(ctx, ids[:3])
	require.NoError(t, err, "one locked row stopped the bulk cancel")
	require.Len(t, res, 3)
	require.NoError(t, res[0].Err)
	require.Error(t, res[1].Err)
	require.Contains(t, res[1].Err.Error(), "55P03")
	require.NoError(t, res[2].Err)
	unlock()
	for i, id := range ids[:3] {
		j, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		if i == 1 {
			require.NotEqual(t, pronto.StateCancelled, j.State, "the locked job was cancelled")
		} else {
			require.Equal(t, pronto.StateCancelled, j.State)
		}
	}

	unlockTable := lockJobsTable(t, schema)
	res, err = c.JobCancelMany(ctx, ids[3:])
	require.Error(t, err, "a locked table did not stop the bulk cancel")
	require.True(t, strings.Contains(err.Error(), "stopped after 2 of 4 jobs"), "%v", err)
	require.Len(t, res, 2)
	unlockTable()
	for _, id := range ids[5:] {
		j, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.NotEqual(t, pronto.StateCancelled, j.State, "a job after the stop was touched")
	}
}
