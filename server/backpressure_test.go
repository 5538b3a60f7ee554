package server

import (
	"strings"
	"testing"
)

func TestBackpressureHTTP(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "PUT", "/ojs/v1/admin/queues/email/config", `{"backpressure":{"max_depth":2,"strategy":"reject"}}`)
	if r.status != 200 || obj(t, r, "backpressure")["max_depth"] != 2.0 || r.body["queue"] != "email" {
		t.Fatalf("put config: %s", r.raw)
	}
	if r := call(t, s, "GET", "/ojs/v1/admin/queues/email/config", nil); obj(t, r, "backpressure")["max_depth"] != 2.0 {
		t.Fatalf("get config: %s", r.raw)
	}
	job := `{"type":"email.send","args":[],"options":{"queue":"email"}}`
	for range 2 {
		if r := call(t, s, "POST", "/ojs/v1/jobs", job); r.status != 201 {
			t.Fatalf("enqueue: %s", r.raw)
		}
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", job)
	checkErrorBody(t, r, 429, CodeQueueFull)
	if r.header.Get("Retry-After") != "1" || r.header.Get("X-OJS-Queue-Depth") != "2" || r.header.Get("X-OJS-Queue-Bound") != "2" {
		t.Fatalf("headers %v", r.header)
	}
	d := obj(t, r, "error")["details"].(map[string]any)
	if d["queue"] != "email" || d["depth"] != 2.0 || d["bound"] != 2.0 || obj(t, r, "error")["retryable"] != true {
		t.Fatalf("details: %s", r.raw)
	}
	// A batch that touches the full queue is refused whole; other queues take jobs.
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]},`+job+`]}`)
	checkErrorBody(t, r, 429, CodeQueueFull)
	if r := call(t, s, "GET", "/ojs/v1/queues/default/stats", nil); obj(t, r, "queue")["available"] != 0.0 {
		t.Fatalf("a refused batch stored jobs: %s", r.raw)
	}
	if r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`); r.status != 201 {
		t.Fatalf("unbounded queue: %s", r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/events?types=backpressure.rejected", nil)
	if evs := r.body["events"].([]any); len(evs) != 2 {
		t.Fatalf("backpressure.rejected events: %s", r.raw)
	}

	// Bad configurations are named.
	for body, status := range map[string]int{
		`{"backpressure":{"strategy":"block"}}`:      422,
		`{"backpressure":{"max_size_bytes":1000}}`:   422,
		`{"backpressure":{"max_depth":-1}}`:          400,
		`{"backpressure":{"max_depth":"ten"}}`:       400,
		`{"backpressure":{"warning_threshold":0.8}}`: 400,
		`{"workers":3}`: 400,
		`[1]`:           400,
	} {
		r := call(t, s, "PUT", "/ojs/v1/admin/queues/email/config", body)
		checkErrorBody(t, r, status, "")
	}
	r = call(t, s, "PUT", "/ojs/v1/admin/queues/Bad!/config", `{"backpressure":{"max_depth":1}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/admin/queues/email/config", `{}`)
	checkErrorBody(t, r, 405, CodeMethodNotAllowed)

	// 0 lifts the bound.
	call(t, s, "PUT", "/ojs/v1/admin/queues/email/config", `{"backpressure":{"max_depth":0}}`)
	if r := call(t, s, "POST", "/ojs/v1/jobs", job); r.status != 201 {
		t.Fatalf("after lifting the bound: %s", r.raw)
	}
	if !strings.Contains(string(call(t, s, "GET", "/ojs/manifest", nil).raw), `"backpressure"`) {
		t.Fatal("the manifest does not list the backpressure extension")
	}
}

// TestQueueConfigRetention, on every store: PUT /admin/queues/{name}/config sets a queue's own
// retention (ojs-admin-api.md 6.6): completed and cancelled as the queue's retention, discarded as
// its dead-letter retention's max_age beside the max_count it had; null clears a member, an absent
// one is unchanged, and a bad one is 400 naming it.
func TestQueueConfigRetention(t *testing.T) {
	const path = "/ojs/v1/admin/queues/billing/config"
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			mustCall(t, s, 200, "PUT", "/ojs/v1/dead-letter/retention", `{"queues":{"billing":{"max_count":500}}}`)
			for body, field := range map[string]string{
				`{"retention":{"completed":"soon"}}`:         "retention.completed",
				`{"retention":{"completed":"PT0S"}}`:         "retention.completed",
				`{"retention":{"cancelled":7}}`:              "retention.cancelled",
				`{"retention":{"archived":"P1D"}}`:           "retention.archived",
				`{"retention":"P1D"}`:                        "retention",
				`{"concurrency":30}`:                         "concurrency",
				`{"rate_limit":{"limit":1,"period":"PT1S"}}`: "rate_limit",
			} {
				r := call(t, s, "PUT", path, body)
				checkErrorBody(t, r, 400, "")
				if details, _ := r.body["error"].(map[string]any)["details"].(map[string]any); details == nil || details["field"] != field {
					t.Errorf("PUT %s: %s, want the error to name %s", body, r.raw, field)
				}
			}
			if r := mustCall(t, s, 200, "GET", path, nil); len(obj(t, r, "retention")) != 0 {
				t.Fatalf("nothing set by the refused PUTs: %s", r.raw)
			}

			r := mustCall(t, s, 200, "PUT", path, `{"retention":{"completed":"P14D","discarded":"P90D","cancelled":null}}`)
			for _, r := range []*response{r, mustCall(t, s, 200, "GET", path, nil)} {
				ret := obj(t, r, "retention")
				if len(ret) != 2 || ret["completed"] != "P14D" || ret["discarded"] != "P90D" {
					t.Fatalf("retention: %s", r.raw)
				}
			}
			dead := mustCall(t, s, 200, "GET", "/ojs/v1/dead-letter/retention", nil)
			if b, _ := dead.body["queues"].(map[string]any)["billing"].(map[string]any); b["max_age"] != "P90D" || b["max_count"] != 500.0 {
				t.Fatalf("the dead-letter retention keeps its max_count beside the new max_age: %s", dead.raw)
			}
			// Absent members stay; null clears.
			r = mustCall(t, s, 200, "PUT", path, `{"retention":{"cancelled":"P1D"}}`)
			if ret := obj(t, r, "retention"); len(ret) != 3 || ret["cancelled"] != "P1D" || ret["completed"] != "P14D" {
				t.Fatalf("after adding cancelled: %s", r.raw)
			}
			r = mustCall(t, s, 200, "PUT", path, `{"retention":{"completed":null,"cancelled":null,"discarded":null}}`)
			if ret := obj(t, r, "retention"); len(ret) != 0 {
				t.Fatalf("after clearing: %s", r.raw)
			}
			dead = mustCall(t, s, 200, "GET", "/ojs/v1/dead-letter/retention", nil)
			if b, _ := dead.body["queues"].(map[string]any)["billing"].(map[string]any); b["max_age"] != nil || b["max_count"] != 500.0 {
				t.Fatalf("max_count stays when max_age is cleared: %s", dead.raw)
			}
		})
	}
}
