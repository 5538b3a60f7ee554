package server

import (
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestTenantAdminAPI: tenant config, limits, stats and listings under /ojs/v1/admin/tenants, and the
// limits holding at fetch, on every store.
func TestTenantAdminAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})

			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants", nil)
			if items := r.body["items"].([]any); len(items) != 0 {
				t.Fatalf("tenants before any: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/acme", nil), 404, CodeNotFound)

			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/acme",
				`{"tenant_id":"acme","fairness_weight":3,"limits":{"max_concurrency":2}}`)
			if r.body["fairness_weight"] != 3.0 || r.body["limits"].(map[string]any)["max_concurrency"].(map[string]any)["limit"] != 2.0 {
				t.Fatalf("put: %s", r.raw)
			}
			for body, field := range map[string]string{
				`{"fairness_weight":0}`:                                     "fairness_weight",
				`{"fairness_weight":1001}`:                                  "fairness_weight",
				`{"tenant_id":"other"}`:                                     "tenant_id",
				`{"limits":{"max_queue_depth":-5}}`:                         "limits.max_queue_depth",
				`{"limits":{"max_enqueue_rate":{"limit":5}}}`:               "limits.max_enqueue_rate",
				`{"limits":{"max_start_rate":{"limit":5}}}`:                 "limits.max_start_rate",
				`{"limits":{"max_concurrency":-1}}`:                         "limits.max_concurrency",
				`{"priority_boost":"x"}`:                                    "priority_boost",
				`{"priority_boost":1.5}`:                                    "priority_boost",
				`{"priority_boost":201}`:                                    "priority_boost",
				`{"priority_boost":-201}`:                                   "priority_boost",
				`{"surprise":1}`:                                            "surprise",
				`{"limits":{"max_start_rate":{"limit":5,"period":"soon"}}}`: "limits.max_start_rate.period",
			} {
				r := call(t, s, "PUT", "/ojs/v1/admin/tenants/acme", body)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != field {
					t.Fatalf("%s: field %v, want %s", body, f, field)
				}
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/tenants", nil), 405, "")

			for range 3 {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"options":{"queue":"tq"}}`, "X-OJS-Tenant", "acme")
			}
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"t.job","args":[],"options":{"queue":"tq"},"meta":{"tenant_id":"beta"}}`)

			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants", nil)
			items := r.body["items"].([]any)
			if len(items) != 2 || items[0].(map[string]any)["tenant_id"] != "acme" || items[1].(map[string]any)["tenant_id"] != "beta" {
				t.Fatalf("list: %s", r.raw)
			}
			if n := items[0].(map[string]any)["jobs"].(map[string]any)["available"]; n != 3.0 {
				t.Fatalf("acme's available jobs %v: %s", n, r.raw)
			}

			// acme's limit of 2 holds at fetch; beta is not held back.
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"tq"}, "worker_id": "w1", "count": 10})
			jobs := r.body["jobs"].([]any)
			per := map[any]int{}
			for _, j := range jobs {
				per[j.(map[string]any)["meta"].(map[string]any)["tenant_id"]]++
			}
			if per["acme"] != 2 || per["beta"] != 1 {
				t.Fatalf("fetched %v: %s", per, r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/acme/stats", nil)
			if c := r.body["limits"].(map[string]any)["max_concurrency"].(map[string]any)["current"]; c != 2.0 {
				t.Fatalf("stats: %s", r.raw)
			}
			if a := r.body["jobs"].(map[string]any)["active"]; a != 2.0 {
				t.Fatalf("stats: %s", r.raw)
			}

			// Limits without a bound remove them: acme's last job is fetched.
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/acme/limits", `{"max_concurrency":0,"reason":"incident over"}`)
			if len(r.body["limits"].(map[string]any)) != 0 {
				t.Fatalf("limits left: %s", r.raw)
			}
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"tq"}, "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 1 {
				t.Fatalf("fetched %d after the limit went: %s", n, r.raw)
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/acme/limits", `{"max_start_rate":{"limit":10,"period":"PT1M"}}`)
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/acme", nil)
			if rate := r.body["limits"].(map[string]any)["max_start_rate"].(map[string]any); rate["limit"] != 10.0 || rate["period"] != "PT1M" {
				t.Fatalf("rate: %s", r.raw)
			}

			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/tenants/acme", nil)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/tenants/acme", nil), 404, CodeNotFound)
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/acme", nil)
			if r.body["fairness_weight"] != 1.0 || r.body["configured"] != false {
				t.Fatalf("after delete: %s", r.raw)
			}
		})
	}
}
