package server

import (
	"context"
	"testing"
)

// TestTenantHeaderAndMeta: X-OJS-Tenant is copied into meta.tenant_id; meta.tenant_id alone names the
// tenant; both, different, is 400; the tenant is stored with the job.
func TestTenantHeaderAndMeta(t *testing.T) {
	s, client := newTestServer(t, Config{})
	tenantOf := func(id string) string {
		j, err := client.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Tenant
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, "X-OJS-Tenant", "tenant_acme")
	if r.status != 201 || obj(t, r, "job")["meta"].(map[string]any)["tenant_id"] != "tenant_acme" {
		t.Fatalf("header: %s", r.raw)
	}
	if got := tenantOf(obj(t, r, "job")["id"].(string)); got != "tenant_acme" {
		t.Fatalf("stored tenant %q", got)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"tenant_id":"globex"}}`)
	if r.status != 201 || tenantOf(obj(t, r, "job")["id"].(string)) != "globex" {
		t.Fatalf("meta: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"tenant_id":"globex"}}`, "X-OJS-Tenant", "globex")
	if r.status != 201 {
		t.Fatalf("same tenant twice: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"tenant_id":"globex"}}`, "X-OJS-Tenant", "acme")
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"tenant_id":7}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[],"meta":{"tenant_id":"has space"}}]}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if f := obj(t, r, "error")["details"].(map[string]any)["field"]; f != "jobs[1].meta.tenant_id" {
		t.Fatalf("batch field %v", f)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]}]}`, "X-OJS-Tenant", "initech")
	if r.status != 201 || tenantOf(r.body["jobs"].([]any)[0].(map[string]any)["id"].(string)) != "initech" {
		t.Fatalf("batch header: %s", r.raw)
	}
}
