package pronto_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertTenant: a job's tenant is stored and returned on every store; a bad one is refused.
func TestInsertTenant(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		j, err := c.Insert(ctx, bpArgs{N: 1}, &pronto.InsertOpts{Tenant: "tenant_acme-corp"})
		require.NoError(t, err)
		require.Equal(t, "tenant_acme-corp", j.Tenant)
		got, err := c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, "tenant_acme-corp", got.Tenant)
		for _, bad := range []string{"has space", strings.Repeat("t", 256), "tab\t"} {
			_, err := c.Insert(ctx, bpArgs{N: 2}, &pronto.InsertOpts{Tenant: bad})
			require.ErrorIs(t, err, pronto.ErrInvalidArgs, bad)
		}
	})
}
