package server

import (
	"net/http"
	"testing"
)

// TestQueuePriorityStats: GET /ojs/v1/queues/{name}/priority-stats answers ojs-priority.md §10.3's
// shape with the queue's available jobs per priority (named levels as their numbers, a tenant's jobs
// included; not scheduled jobs nor another queue's), follows fetches, and refuses a bad queue name
// and other methods; on every store.
func TestQueuePriorityStats(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})

			r := mustCall(t, s, 200, "GET", "/ojs/v1/queues/pq/priority-stats", nil)
			if len(r.body["counts_by_priority"].(map[string]any)) != 0 || r.body["total"] != 0.0 || r.body["queue"] != "pq" {
				t.Fatalf("empty queue: %s", r.raw)
			}

			for _, body := range []string{
				`{"type":"p.job","args":[],"options":{"queue":"pq"}}`,
				`{"type":"p.job","args":[],"options":{"queue":"pq"}}`,
				`{"type":"p.job","args":[],"options":{"queue":"pq","priority":"high"}}`,
				`{"type":"p.job","args":[],"options":{"queue":"pq","priority":-20}}`,
				`{"type":"p.job","args":[],"options":{"queue":"pq","priority":-20,"scheduled_at":"+PT1H"}}`,
				`{"type":"p.job","args":[],"options":{"queue":"other","priority":-20}}`,
			} {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", body)
			}
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"p.job","args":[],"options":{"queue":"pq","priority":-20}}`, "X-OJS-Tenant", "acme")

			r = mustCall(t, s, 200, "GET", "/ojs/v1/queues/pq/priority-stats", nil)
			if !jsonEqual(t, mustJSON(t, r.body["counts_by_priority"]), `{"10":1,"0":2,"-20":2}`) || r.body["total"] != 5.0 {
				t.Fatalf("counts: %s", r.raw)
			}
			if want := `{"queue":"pq","counts_by_priority":{"10":1,"0":2,"-20":2},"total":5,`; string(r.raw[:len(want)]) != want {
				t.Fatalf("the counts are not highest priority first: %s", r.raw)
			}

			// A fetch takes its job out of the counts: the highest priority, or the tenant's job when
			// the tenant's turn comes first (fetches rotate across tenants, from a place each store
			// chooses).
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"pq"}, "worker_id": "w1", "count": 1})
			want := `{"0":2,"-20":2}`
			if p := r.body["jobs"].([]any)[0].(map[string]any)["priority"]; p == -20.0 {
				want = `{"10":1,"0":2,"-20":1}`
			} else if p != 10.0 {
				t.Fatalf("fetched: %s", r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/queues/pq/priority-stats", nil)
			if !jsonEqual(t, mustJSON(t, r.body["counts_by_priority"]), want) || r.body["total"] != 4.0 {
				t.Fatalf("after a fetch of 1, want %s: %s", want, r.raw)
			}

			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/queues/Bad%20Name/priority-stats", nil), http.StatusBadRequest, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/queues/pq/priority-stats", nil), http.StatusMethodNotAllowed, "")
		})
	}
}
