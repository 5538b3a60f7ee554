package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// errorField returns the details.field of an error answer ("" when it has none).
func errorField(r *response) string {
	e, _ := r.body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	f, _ := d["field"].(string)
	return f
}

// TestAdminListsPaginate: GET /admin/queues, /admin/workers and /admin/tenants page their items with
// page and per_page (ojs-admin-api.md 4.3, 6.1, 7.1, 9.1), in a stable order, with a pagination
// object that tells the truth, and refuse a page or per_page out of range naming it.
func TestAdminListsPaginate(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for i := 0; i < 3; i++ {
		mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs",
			fmt.Sprintf(`{"type":"a.b","args":[],"options":{"queue":"pq%d"}}`, i), "X-OJS-Tenant", fmt.Sprintf("t%d", i))
		// An OJS worker on record (its fetch records it).
		mustCall(t, s, http.StatusOK, "POST", "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":["none"],"worker_id":"w%d"}`, i))
	}
	for _, path := range []string{"/ojs/v1/admin/queues", "/ojs/v1/admin/workers", "/ojs/v1/admin/tenants"} {
		t.Run(path, func(t *testing.T) {
			all := mustCall(t, s, http.StatusOK, "GET", path, nil)
			items := all.body["items"].([]any)
			require.GreaterOrEqual(t, len(items), 3, "%s", all.raw)
			require.Equal(t, map[string]any{"total": float64(len(items)), "page": 1.0, "per_page": 20.0, "has_more": false},
				all.body["pagination"])

			r := mustCall(t, s, http.StatusOK, "GET", path+"?page=2&per_page=1", nil)
			require.Equal(t, items[1:2], r.body["items"], "page 2 of 1 holds the second item")
			require.Equal(t, map[string]any{"total": float64(len(items)), "page": 2.0, "per_page": 1.0, "has_more": true},
				r.body["pagination"])

			last := mustCall(t, s, http.StatusOK, "GET", fmt.Sprintf("%s?page=%d&per_page=1", path, len(items)), nil)
			require.Equal(t, items[len(items)-1:], last.body["items"])
			require.Equal(t, false, last.body["pagination"].(map[string]any)["has_more"])

			beyond := mustCall(t, s, http.StatusOK, "GET", path+"?page=99", nil)
			require.Empty(t, beyond.body["items"])

			for param, bad := range map[string]string{"per_page": "abc", "page": "0"} {
				r := call(t, s, "GET", path+"?"+param+"="+bad, nil)
				checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
				require.Equal(t, param, errorField(r))
			}
			r = call(t, s, "GET", path+"?per_page=101", nil)
			checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
			require.Equal(t, "per_page", errorField(r))
		})
	}
}

// TestTenantJobsTimeRange: GET /admin/tenants/{id}/jobs filters by since and until as GET
// /admin/jobs does (ojs-admin-api.md 4.3: listings of jobs filter by time range).
func TestTenantJobsTimeRange(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"meta":{"tenant_id":"acme"}}`)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for q, want := range map[string]int{
		"until=" + past: 0, "since=" + future: 0, "since=" + past: 1, "until=" + future: 1,
		"since=" + past + "&until=" + future: 1, "since=" + future + "&until=" + past: 0,
	} {
		r := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/tenants/acme/jobs?"+q, nil)
		items := r.body["items"].([]any)
		require.Len(t, items, want, "?%s: %s", q, r.raw)
		if want == 1 {
			require.Equal(t, id, items[0].(map[string]any)["id"])
		}
		// The same filter on GET /admin/jobs selects the same jobs.
		require.Len(t, mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/jobs?"+q, nil).body["items"], want, "/admin/jobs?%s", q)
	}
	for _, param := range []string{"since", "until"} {
		r := call(t, s, "GET", "/ojs/v1/admin/tenants/acme/jobs?"+param+"=yesterday", nil)
		checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
		require.Equal(t, param, errorField(r))
	}
}

// TestTenantJobsUnknownTenantAnyPage: GET /admin/tenants/{id}/jobs answers 404 for a tenant with no
// jobs, weight, priority boost or limits on every page and from every cursor, not only on page 1;
// a known tenant's empty page is 200.
func TestTenantJobsUnknownTenantAnyPage(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := enqueueJob(t, s, `{"type":"a.b","args":[]}`) // a job of no tenant, as a cursor
	for _, q := range []string{"", "?page=2", "?cursor=" + id, "?state=completed"} {
		checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/nobody/jobs"+q, nil), http.StatusNotFound, CodeNotFound)
	}
	mustCall(t, s, http.StatusOK, "PUT", "/ojs/v1/admin/tenants/known", `{"fairness_weight":2}`)
	for _, q := range []string{"", "?page=2", "?cursor=" + id} {
		r := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/tenants/known/jobs"+q, nil)
		require.Empty(t, r.body["items"], "%s", q)
	}
}

// TestDeadLetterRetryKeepsTenant: a job's tenant is its meta.tenant_id (ojs-multi-tenancy.md §5.1),
// and a retry does not move a job to another tenant: an override whose meta.tenant_id names
// another tenant (or null) is refused 400 naming the field, and the job stays in the dead-letter
// list; an override repeating the job's own tenant is taken, and the new job is listed as that
// tenant's.
func TestDeadLetterRetryKeepsTenant(t *testing.T) {
	s := startedServer(t, "memory")
	mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs",
		`{"type":"a.b","args":[],"meta":{"tenant_id":"acme"},"options":{"queue":"dq","retry":{"max_attempts":1}}}`)
	j := fetchFrom(t, s, "dq")
	n := nackFetched(t, s, j, `{"code":"x","message":"boom","type":"Boom"}`)
	require.Equal(t, "discarded", n.body["state"], "%s", n.raw)
	id := j["id"].(string)

	for _, meta := range []string{`{"tenant_id":"beta"}`, `{"tenant_id":null}`, `{"tenant_id":7}`} {
		r := call(t, s, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"meta":`+meta+`}}`)
		checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
		require.Equal(t, "override.meta.tenant_id", errorField(r), "%s", meta)
	}
	mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/dead-letter/"+id, nil)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/beta/jobs", nil), http.StatusNotFound, CodeNotFound)

	r := mustCall(t, s, http.StatusOK, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"meta":{"tenant_id":"acme","note":"again"}}}`)
	retried := r.body["job"].(map[string]any)
	require.Equal(t, "acme", retried["meta"].(map[string]any)["tenant_id"])
	acme := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/tenants/acme/jobs?state=available", nil).body["items"].([]any)
	require.Len(t, acme, 1)
	require.Equal(t, retried["id"], acme[0].(map[string]any)["id"])
}

// TestPutTenantRefusedStoresNothing: a PUT /admin/tenants/{id} refused 400 stores none of its body:
// a start-rate period under the stores' 1 ms is refused, naming the field, before the weight
// beside it is written. 1 ms itself is taken.
func TestPutTenantRefusedStoresNothing(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "PUT", "/ojs/v1/admin/tenants/acme",
		`{"fairness_weight":5,"priority_boost":3,"limits":{"max_queue_depth":9,"max_start_rate":{"limit":5,"period":"PT0.0001S"}}}`)
	checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
	require.Equal(t, "limits.max_start_rate.period", errorField(r))
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/acme", nil), http.StatusNotFound, CodeNotFound)

	r = call(t, s, "PUT", "/ojs/v1/admin/tenants/acme/limits", `{"max_concurrency":2,"max_start_rate":{"limit":5,"period":"PT0.0001S"}}`)
	checkErrorBody(t, r, http.StatusBadRequest, CodeInvalidRequest)
	require.Equal(t, "max_start_rate.period", errorField(r))
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/acme", nil), http.StatusNotFound, CodeNotFound)

	ok := mustCall(t, s, http.StatusOK, "PUT", "/ojs/v1/admin/tenants/acme",
		`{"fairness_weight":5,"limits":{"max_start_rate":{"limit":5,"period":"PT0.001S"}}}`)
	require.Equal(t, 5.0, ok.body["fairness_weight"])
	require.Equal(t, "PT0.001S", ok.body["limits"].(map[string]any)["max_start_rate"].(map[string]any)["period"])
}
