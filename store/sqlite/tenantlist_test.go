package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListTenantJobsPlan: each state's part of a tenant's listing searches pronto_jobs_tenant_state
// by (tenant, state, id) in id order, stopping at the page size: no scan of the jobs, and what is
// sorted is at most one page per state.
func TestListTenantJobsPlan(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, desc := range []bool{false, true} {
		q := listTenantJobsSQL(desc, false, []string{"active", "available"})
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, nil, nil, nil, "", 51, nil, "\uffff", nil, nil, "", "t")
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		text := strings.Join(plan, "\n")
		t.Logf("descending %v:\n%s", desc, text)
		require.Equal(t, 2, strings.Count(text, "USING INDEX pronto_jobs_tenant_state (tenant=? AND state=? AND id"), "one range per state:\n%s", text)
		require.NotContains(t, text, "SCAN pronto_jobs", "no scan of the jobs")
		// The arms' rows come from the index in id order; what SQLite sorts is each arm's output, at
		// most a page, for the merge (the TEMP B-TREE after each SCAN (subquery-N)).
		require.Equal(t, 2, strings.Count(text, "TEMP B-TREE"), "the merge sorts each arm's page:\n%s", text)
	}
}
