package server

import (
	"net/http"
	"testing"
)

// A workflow's jobs are enqueued jobs of one tenant (ojs-multi-tenancy.md §15.2): they take it from
// X-OJS-Tenant or their meta.tenant_id as POST /ojs/v1/jobs does, and the tenant's limits hold.

// TestWorkflowTenantFromHeader: a workflow posted with X-OJS-Tenant creates jobs of that tenant
// (§5.3 injects it into meta.tenant_id; §15.2), listed by GET /admin/tenants/{id}/jobs.
func TestWorkflowTenantFromHeader(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/workflows",
		`{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`, "X-OJS-Tenant", "acme")
	jobs, _ := r.body["jobs"].([]any)
	if len(jobs) != 2 {
		t.Fatalf("workflow jobs: %s", r.raw)
	}
	for i, j := range jobs {
		meta, _ := j.(map[string]any)["meta"].(map[string]any)
		if meta["tenant_id"] != "acme" {
			t.Errorf("step %d of a workflow posted with X-OJS-Tenant: acme has meta %v, want tenant_id acme", i, meta)
		}
	}
	r = call(t, s, "GET", "/ojs/v1/admin/tenants/acme/jobs", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /admin/tenants/acme/jobs after a workflow of 2 jobs for acme: %d %s", r.status, r.raw)
	}
	if items, _ := r.body["items"].([]any); len(items) != 2 {
		t.Fatalf("acme's jobs: %d listed, want the workflow's 2: %s", len(items), r.raw)
	}
}

// TestWorkflowStepTenantStored: a workflow step's meta.tenant_id (§5.1) makes it the tenant's job, as
// for POST /ojs/v1/jobs: counted in the tenant's stats.
func TestWorkflowStepTenantStored(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/workflows",
		`{"type":"group","name":"g","jobs":[{"type":"a.b","args":[],"meta":{"tenant_id":"acme"}},{"type":"a.b","args":[],"meta":{"tenant_id":"acme"}}]}`)
	r := call(t, s, "GET", "/ojs/v1/admin/tenants/acme", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /admin/tenants/acme after a workflow whose jobs all name meta.tenant_id acme: %d %s", r.status, r.raw)
	}
	if total := r.body["jobs"].(map[string]any)["total"]; total != 2.0 {
		t.Fatalf("acme's jobs total %v, want 2: %s", total, r.raw)
	}
}

// TestWorkflowMixedTenantsRefused: steps of different tenants are refused with 400 (§15.2), and so is
// a step naming another tenant than the header (§5.3), as for POST /ojs/v1/jobs.
func TestWorkflowMixedTenantsRefused(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/workflows",
		`{"type":"chain","name":"c","steps":[{"type":"a.b","args":[],"meta":{"tenant_id":"acme"}},{"type":"a.b","args":[],"meta":{"tenant_id":"beta"}}]}`)
	checkErrorBody(t, r, http.StatusBadRequest, "")
	r = call(t, s, "POST", "/ojs/v1/workflows",
		`{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]},{"type":"a.b","args":[],"meta":{"tenant_id":"beta"}}]}`, "X-OJS-Tenant", "acme")
	checkErrorBody(t, r, http.StatusBadRequest, "")
}

// TestWorkflowRequireTenant: with RequireTenant, a workflow whose jobs name no tenant is refused with
// 422 (§5.1), as a single job is.
func TestWorkflowRequireTenant(t *testing.T) {
	s, _ := newTestServer(t, Config{RequireTenant: true})
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]}]}`)
	checkErrorBody(t, r, http.StatusUnprocessableEntity, "")
	mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]}]}`, "X-OJS-Tenant", "acme")
}

// TestWorkflowTenantLimit: a tenant's enqueue limits hold for a workflow as a whole (§8.2): 3 jobs
// for a tenant whose max_queue_depth is 2 are refused with 429, none of them stored.
func TestWorkflowTenantLimit(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	mustCall(t, s, http.StatusOK, "PUT", "/ojs/v1/admin/tenants/acme/limits", `{"max_queue_depth":2}`)
	r := call(t, s, "POST", "/ojs/v1/workflows",
		`{"type":"group","name":"g","jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`, "X-OJS-Tenant", "acme")
	checkErrorBody(t, r, http.StatusTooManyRequests, CodeTenantLimitExceeded)
	tr := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/tenants/acme/jobs", nil)
	if items, _ := tr.body["items"].([]any); len(items) != 0 {
		t.Fatalf("a refused workflow left %d of acme's jobs: %s", len(items), tr.raw)
	}
}
