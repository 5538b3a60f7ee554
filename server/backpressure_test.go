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
