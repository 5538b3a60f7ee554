package server

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestWorkerPoolsHTTP: pools are created, listed with their active workers and jobs, and removed under
// /ojs/v1/admin/pools (ojs-fair-scheduling.md §10.1, FS-004); a fetch naming a pool takes only the
// pool's queues and at most its free capacity; bad configs are named. On every store.
func TestWorkerPoolsHTTP(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openTestStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})

			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/pools", nil)
			if items := r.body["items"].([]any); len(items) != 0 {
				t.Fatalf("pools before any: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/pools/critical", nil), 404, CodeNotFound)
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/critical", `{"queues":["critical","payments"],"concurrency":2}`)
			if r.body["strategy"] != "round-robin" || r.body["concurrency"] != 2.0 || r.body["active_jobs"] != 0.0 {
				t.Fatalf("put: %s", r.raw)
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/general", `{"name":"general","queues":["default"],"strategy":"strict"}`)
			for body, status := range map[string]int{
				`{"queues":[]}`:                          400,
				`{"queues":["Bad!"]}`:                    400,
				`{"queues":["a","a"]}`:                   400,
				`{"queues":["a"],"concurrency":-1}`:      400,
				`{"queues":["a"],"strategy":"weighted"}`: 422,
				`{"queues":["a"],"weights":{"a":1}}`:     422,
				`{"concurrency":3}`:                      400,
				`{"queues":["a"],"name":"other"}`:        400,
				`{"queues":["a"],"surprise":true}`:       400,
			} {
				checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/critical", body), status, "")
			}
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/Bad!", `{"queues":["a"]}`), 400, CodeInvalidRequest)

			for range 3 {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"pay","args":[],"options":{"queue":"payments"}}`)
			}
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"other","args":[],"options":{"queue":"default"}}`)

			// A fetch through the pool names no queues, takes the pool's, and stops at its concurrency.
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 2 {
				t.Fatalf("fetched %d through a pool of concurrency 2: %s", n, r.raw)
			}
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 0 {
				t.Fatalf("fetched %d through a full pool: %s", n, r.raw)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "queues": []string{"default"}}), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "nope"}), 400, CodeInvalidRequest)

			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/pools", nil)
			items := r.body["items"].([]any)
			if len(items) != 2 {
				t.Fatalf("list: %s", r.raw)
			}
			crit := items[0].(map[string]any)
			if crit["name"] != "critical" || crit["active_jobs"] != 2.0 || crit["active_workers"] != 1.0 || items[1].(map[string]any)["active_workers"] != 0.0 {
				t.Fatalf("list: %s", r.raw)
			}

			// Raising the concurrency lets the third job out.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/critical", `{"queues":["critical","payments"],"concurrency":5}`)
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "queues": []string{"payments"}, "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 1 {
				t.Fatalf("fetched %d after raising the concurrency: %s", n, r.raw)
			}

			// Round-robin: fetches of one job take the pool's queues in turns, skipping an empty one.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/rr", `{"queues":["qa","qb","qc"],"strategy":"round-robin"}`)
			for _, q := range []string{"qa", "qa", "qa", "qb", "qb"} {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"rr","args":[],"options":{"queue":"`+q+`"}}`)
			}
			var order []string
			for range 5 {
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "rr", "worker_id": "w2"})
				order = append(order, r.body["jobs"].([]any)[0].(map[string]any)["queue"].(string))
			}
			if got := strings.Join(order, ","); got != "qa,qb,qa,qb,qa" {
				t.Fatalf("round-robin order %s", got)
			}

			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/pools/critical", nil)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/pools/critical", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/pools", nil), 405, CodeMethodNotAllowed)
		})
	}
}
