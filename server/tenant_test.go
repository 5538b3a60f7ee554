package server

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pronto-jobs/pronto"
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

// tenantViewArgs is a Go job type for TestGoTenantInJobView.
type tenantViewArgs struct{}

func (tenantViewArgs) Kind() string { return "tenant.view" }

// TestGoTenantInJobView: a job whose tenant was set through Go (InsertOpts.Tenant) shows it as
// meta.tenant_id, where OJS multi-tenancy (§3) puts it, as a job enqueued over HTTP does: beside the
// job's other meta, and never over a tenant_id its meta already has. The dead-letter archive writes
// the same job object (TestDeadLetterFileArchiveRoundTrip in the root package).
func TestGoTenantInJobView(t *testing.T) {
	s, client := newTestServer(t, Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		opts *pronto.InsertOpts
		want string
	}{
		{&pronto.InsertOpts{Tenant: "acme"}, `{"tenant_id":"acme"}`},
		{&pronto.InsertOpts{Tenant: "acme", Meta: map[string]any{}}, `{"tenant_id":"acme"}`},
		{&pronto.InsertOpts{Tenant: "acme", Meta: map[string]any{"trace": map[string]any{"tenant_id": "x"}}}, `{"tenant_id":"acme","trace":{"tenant_id":"x"}}`},
		{&pronto.InsertOpts{Tenant: "acme", Meta: map[string]any{"tenant_id": "acme", "m": 1}}, `{"m":1,"tenant_id":"acme"}`},
		{&pronto.InsertOpts{Meta: map[string]any{"m": 1}}, `{"m":1}`},
		{&pronto.InsertOpts{}, ``},
	} {
		j, err := client.Insert(ctx, tenantViewArgs{}, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		r := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+j.ID, nil)
		meta := mustJSON(t, obj(t, r, "job")["meta"])
		if tc.want == "" {
			if _, ok := obj(t, r, "job")["meta"]; ok {
				t.Errorf("a job without tenant or meta shows meta: %s", r.raw)
			}
			continue
		}
		if !jsonEqual(t, meta, tc.want) {
			t.Errorf("tenant %q, meta %v: shown meta %s, want %s", tc.opts.Tenant, tc.opts.Meta, meta, tc.want)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"tenant_id":"globex","k":"v"}}`)
	if r.status != 201 || !jsonEqual(t, mustJSON(t, obj(t, r, "job")["meta"]), `{"tenant_id":"globex","k":"v"}`) {
		t.Fatalf("an HTTP job's meta: %s", r.raw)
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a []byte, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// mustJSON marshals v.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
