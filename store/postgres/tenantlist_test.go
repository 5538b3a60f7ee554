package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestListTenantJobsReadsTheTenantIndex: beside a large tenant (100,000 jobs, most completed) and
// 20,000 jobs without a tenant in the same queue, a page of a small tenant's jobs, and a page of the
// large tenant's at a cursor, read a few dozen buffers through jobs_tenant_state_idx: no scan of the
// queue or of the large tenant's jobs. Buffers, not time, so that the machine's load does not matter.
func TestListTenantJobsReadsTheTenantIndex(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, completed_at, tenant)
SELECT (lpad(to_hex(1700000000000 + i), 12, '0') || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
	'k', 'q', '[]', CASE WHEN i % 10 = 0 THEN 'available' ELSE 'completed' END, now(), now(),
	CASE WHEN i % 10 = 0 THEN NULL ELSE now() END,
	CASE WHEN i < 100000 THEN 'large' ELSE NULL END
FROM generate_series(0, 119999) AS i`)
	_, err := s.pool.Exec(ctx, fill)
	require.NoError(t, err)
	var small []string
	for range 5 {
		p := params("q")
		p.Tenant = "small"
		small = append(small, p.ID)
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
	}
	_, err = s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`))
	require.NoError(t, err)

	large, _, err := s.ListJobs(ctx, store.ListParams{Tenant: "large", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, large, 1000)
	cursor := large[999].ID
	for _, c := range []struct {
		name string
		p    store.ListParams
		n    int // rows the statement returns: up to Limit+1 (the one beyond says a page follows)
	}{
		{"small", store.ListParams{Tenant: "small", Limit: 50}, 5},
		{"small-newest", store.ListParams{Tenant: "small", Limit: 50, Descending: true}, 5},
		{"small-available", store.ListParams{Tenant: "small", States: []store.State{store.StateAvailable}, Limit: 50}, 5},
		{"large-at-cursor", store.ListParams{Tenant: "large", After: cursor, Limit: 50}, 51},
		{"large-newest", store.ListParams{Tenant: "large", Limit: 50, Descending: true}, 51},
		{"large-available", store.ListParams{Tenant: "large", States: []store.State{store.StateAvailable}, Limit: 50}, 51},
	} {
		limit := c.p.Limit
		sql, args, err := s.listQuery(c.p, limit)
		require.NoError(t, err)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} { // pgx prepares statements
			var plan []byte
			conn, err := s.pool.Acquire(ctx)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			err = conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan)
			_, _ = conn.Exec(ctx, "RESET plan_cache_mode")
			conn.Release()
			require.NoError(t, err)
			var root []struct {
				Plan map[string]any `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal(plan, &root))
			top := root[0].Plan
			buffers := top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64)
			rows := top["Actual Rows"].(float64)
			t.Logf("%s (%s): %v rows, %v buffers", c.name, mode, rows, buffers)
			require.Contains(t, string(plan), "jobs_tenant_state_idx", "%s reads the tenant index", c.name)
			require.NotContains(t, string(plan), `"Seq Scan"`, c.name)
			require.Equal(t, float64(c.n), rows, c.name)
			// One page per state asked (8 states when none): a few index pages and the rows' heap pages.
			require.Less(t, buffers, 400.0, "%s reads %v buffers", c.name, buffers)
		}
		jobs, _, err := s.ListJobs(ctx, c.p)
		require.NoError(t, err)
		require.Len(t, jobs, min(c.n, limit))
	}
	got, _, err := s.ListJobs(ctx, store.ListParams{Tenant: "small", Limit: 50})
	require.NoError(t, err)
	ids := make([]string, len(got))
	for i, j := range got {
		ids[i] = j.ID
	}
	require.ElementsMatch(t, small, ids)
}
