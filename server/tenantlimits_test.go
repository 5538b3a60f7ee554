package server

import (
	"strings"
	"testing"
)

// TestTenantEnqueueLimitsHTTP: a tenant's max_queue_depth, max_scheduled and max_enqueue_rate set
// through the admin API refuse an enqueue beyond them with 429 tenant_limit_exceeded and Retry-After
// (ojs-multi-tenancy.md §8.2, MT-004), a batch whole, show in the tenant's stats, record a
// tenant.limit_exceeded event, and go with DELETE; on every store.
func TestTenantEnqueueLimitsHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})

			r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/acme/limits",
				`{"max_concurrency":5,"max_queue_depth":2,"max_scheduled":1,"reason":"flood"}`)
			l := r.body["limits"].(map[string]any)
			if l["max_queue_depth"].(map[string]any)["limit"] != 2.0 || l["max_scheduled"].(map[string]any)["limit"] != 1.0 || l["max_concurrency"] == nil {
				t.Fatalf("put limits: %s", r.raw)
			}
			job := `{"type":"t.job","args":[]}`
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"options":{"delay_until":"2999-01-01T00:00:00Z"}}`, "X-OJS-Tenant", "acme")
			r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"options":{"delay_until":"2999-01-01T00:00:00Z"}}`, "X-OJS-Tenant", "acme")
			checkErrorBody(t, r, 429, CodeTenantLimitExceeded)
			if d := r.body["error"].(map[string]any)["details"].(map[string]any); d["limit"] != "max_scheduled" || d["tenant_id"] != "acme" || d["current"] != 1.0 || d["maximum"] != 1.0 {
				t.Fatalf("details: %s", r.raw)
			}
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "acme")
			r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"meta":{"tenant_id":"acme"}}`)
			checkErrorBody(t, r, 429, CodeTenantLimitExceeded)
			if r.header.Get("Retry-After") == "" || r.body["error"].(map[string]any)["retryable"] != true {
				t.Fatalf("no Retry-After: %v %s", r.header, r.raw)
			}
			if d := r.body["error"].(map[string]any)["details"].(map[string]any); d["limit"] != "max_queue_depth" || d["current"] != 2.0 || d["maximum"] != 2.0 {
				t.Fatalf("details: %s", r.raw)
			}
			// A batch touching acme is refused whole; other tenants are not limited.
			r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"t.job","args":[],"meta":{"tenant_id":"beta"}},{"type":"t.job","args":[],"meta":{"tenant_id":"acme"}}]}`)
			checkErrorBody(t, r, 429, CodeTenantLimitExceeded)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/beta", nil), 404, CodeNotFound)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "beta")

			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/acme/stats", nil)
			if c := r.body["limits"].(map[string]any)["max_queue_depth"].(map[string]any)["current"]; c != 2.0 {
				t.Fatalf("stats: %s", r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/events?types=tenant.limit_exceeded", nil)
			if evs := r.body["events"].([]any); len(evs) != 3 {
				t.Fatalf("tenant.limit_exceeded events: %s", r.raw)
			}

			// The enqueue rate, through PUT of the config (which replaces the limits).
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/gamma",
				`{"fairness_weight":2,"limits":{"max_enqueue_rate":{"limit":1,"period":"PT1H"}}}`)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "gamma")
			r = call(t, s, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "gamma")
			checkErrorBody(t, r, 429, CodeTenantLimitExceeded)
			if ra := r.header.Get("Retry-After"); ra != "3600" && ra != "3599" {
				t.Fatalf("Retry-After %q for an hour's window", ra)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants", nil)
			found := false
			for _, it := range r.body["items"].([]any) {
				m := it.(map[string]any)
				if m["tenant_id"] == "gamma" {
					rate := m["limits"].(map[string]any)["max_enqueue_rate"].(map[string]any)
					found = rate["limit"] == 1.0 && rate["period"] == "PT1H"
				}
			}
			if !found {
				t.Fatalf("gamma's enqueue rate not listed: %s", r.raw)
			}

			// DELETE forgets the enqueue limits too.
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/tenants/acme", nil)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "acme")
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/tenants/gamma", nil)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", job, "X-OJS-Tenant", "gamma")
		})
	}
}

// TestRequireTenant: with Config.RequireTenant a job without a tenant is refused with 422 naming
// meta.tenant_id (alone and in a batch), one with a tenant is taken, and the manifest lists
// multi-tenancy; without it, it does not (fair-scheduling is listed either way).
func TestRequireTenant(t *testing.T) {
	manifestExtensions := func(s *Server) string {
		return string(call(t, s, "GET", "/ojs/manifest", nil).raw)
	}
	plain, _ := newTestServer(t, Config{})
	if m := manifestExtensions(plain); strings.Contains(m, `"multi-tenancy"`) || !strings.Contains(m, `"fair-scheduling"`) {
		t.Fatalf("manifest without RequireTenant: %s", m)
	}
	mustCall(t, plain, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[]}`)

	s, _ := newTestServer(t, Config{RequireTenant: true})
	if m := manifestExtensions(s); !strings.Contains(m, `"multi-tenancy"`) || !strings.Contains(m, `"fair-scheduling"`) {
		t.Fatalf("manifest with RequireTenant: %s", m)
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[]}`)
	checkErrorBody(t, r, 422, CodeInvalidRequest)
	if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "meta.tenant_id" {
		t.Fatalf("field %v: %s", f, r.raw)
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"meta":{"other":1}}`), 422, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"t.job","args":[],"meta":{"tenant_id":"acme"}},{"type":"t.job","args":[]}]}`)
	checkErrorBody(t, r, 422, CodeInvalidRequest)
	if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "jobs[1].meta.tenant_id" {
		t.Fatalf("batch field %v: %s", f, r.raw)
	}
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[]}`, "X-OJS-Tenant", "acme")
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"meta":{"tenant_id":"beta"}}`)
}
