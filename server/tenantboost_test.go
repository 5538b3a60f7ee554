package server

import (
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestTenantPriorityBoostAPI: PUT /ojs/v1/admin/tenants/{id} stores priority_boost, GET returns it,
// and the tenant's jobs enqueued from then on (one or a batch) carry their priority plus the boost,
// clamped to -100..100; 0 removes it, DELETE forgets it.
func TestTenantPriorityBoostAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			priority := func(job map[string]any) float64 {
				return job["priority"].(float64)
			}
			enqueue := func(tenant string, prio string) float64 {
				r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs",
					`{"type":"t.job","args":[],"options":{"queue":"bq","priority":`+prio+`}}`, "X-OJS-Tenant", tenant)
				return priority(r.body["job"].(map[string]any))
			}
			if p := enqueue("gold", "5"); p != 5 {
				t.Fatalf("before the boost: priority %v", p)
			}
			r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/gold", `{"priority_boost":20,"fairness_weight":2}`)
			if r.body["priority_boost"] != 20.0 || r.body["configured"] != true {
				t.Fatalf("put: %s", r.raw)
			}
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/gold", nil); r.body["priority_boost"] != 20.0 {
				t.Fatalf("get: %s", r.raw)
			}
			if p := enqueue("gold", "5"); p != 25 {
				t.Fatalf("boosted: priority %v, want 25", p)
			}
			if p := enqueue("gold", "90"); p != 100 {
				t.Fatalf("boosted: priority %v, want 90+20 clamped to 100", p)
			}
			if p := enqueue("other", "5"); p != 5 {
				t.Fatalf("another tenant: priority %v, want 5", p)
			}
			r = mustCall(t, s, 201, "POST", "/ojs/v1/jobs/batch",
				`{"jobs":[{"type":"t.job","args":[],"options":{"queue":"bq","priority":-10},"meta":{"tenant_id":"gold"}},`+
					`{"type":"t.job","args":[],"options":{"queue":"bq","priority":-10},"meta":{"tenant_id":"other"}}]}`)
			jobs := r.body["jobs"].([]any)
			if priority(jobs[0].(map[string]any)) != 10 || priority(jobs[1].(map[string]any)) != -10 {
				t.Fatalf("batch: %s", r.raw)
			}

			// A PUT without priority_boost leaves it; 0 removes it.
			if r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/gold", `{"fairness_weight":3}`); r.body["priority_boost"] != 20.0 {
				t.Fatalf("put without the boost: %s", r.raw)
			}
			if r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/gold", `{"priority_boost":0}`); r.body["priority_boost"] != 0.0 {
				t.Fatalf("put 0: %s", r.raw)
			}
			if p := enqueue("gold", "5"); p != 5 {
				t.Fatalf("after removing the boost: priority %v, want 5", p)
			}

			// A boost alone makes a tenant known; DELETE forgets it.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/lead", `{"priority_boost":-50}`)
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/lead", nil); r.body["priority_boost"] != -50.0 {
				t.Fatalf("get lead: %s", r.raw)
			}
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/tenants/lead", nil)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/lead", nil), 404, CodeNotFound)
		})
	}
}
