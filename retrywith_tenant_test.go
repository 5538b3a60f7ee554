package pronto_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestJobRetryWithKeepsTenant: JobRetryWith refuses an override meta whose tenant_id names another
// tenant than the job's (or null), which would show one tenant over OJS and be stored, limited and
// scheduled as another's; the job's own tenant repeated is taken.
func TestJobRetryWithKeepsTenant(t *testing.T) {
	ctx := context.Background()
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	require.NoError(t, err)
	rows, err := c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "test.tenant", Args: json.RawMessage(`[]`),
		Meta: json.RawMessage(`{"tenant_id":"acme"}`), Opts: pronto.InsertOpts{Tenant: "acme"}}})
	require.NoError(t, err)
	id := rows[0].ID
	_, err = c.JobCancel(ctx, id)
	require.NoError(t, err)

	for _, meta := range []string{`{"tenant_id":"beta"}`, `{"tenant_id":null}`, `{"tenant_id":1}`} {
		_, err := c.JobRetryWith(ctx, id, pronto.RetryOverride{Meta: json.RawMessage(meta)})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, meta)
	}
	old, err := c.JobGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, pronto.StateCancelled, old.State, "a refused retry leaves the job")

	j, err := c.JobRetryWith(ctx, id, pronto.RetryOverride{Meta: json.RawMessage(`{"tenant_id":"acme","note":1}`)})
	require.NoError(t, err)
	require.Equal(t, "acme", j.Tenant)
	require.JSONEq(t, `{"tenant_id":"acme","note":1,"retried_from":"`+id+`"}`, string(j.Meta))
}
