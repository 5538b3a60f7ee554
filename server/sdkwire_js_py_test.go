package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// These tests send what the official OJS JavaScript/TypeScript SDK (openjobspec/ojs-js-sdk) and
// Python SDK (openjobspec/ojs-python-sdk) send, with their headers, and read the answers the way
// those SDKs read them.

// wireCall sends body with the given headers (always Content-Type and Accept, as both SDKs set them
// on every request, a body or not) and returns the recorder.
func wireCall(t *testing.T, h http.Handler, ojsVersion, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	req.Header.Set("Content-Type", "application/openjobspec+json")
	req.Header.Set("Accept", "application/openjobspec+json")
	if ojsVersion != "" {
		req.Header.Set("OJS-Version", ojsVersion)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// jsCall is the JS SDK's HttpTransport: OJS-Version 1.0.0-rc.1; every non-204 answer is parsed
// with response.json(), and a non-2xx throws.
func jsCall(t *testing.T, h http.Handler, method, path, body string, wantStatus int) map[string]any {
	t.Helper()
	rec := wireCall(t, h, "1.0.0-rc.1", method, path, body)
	if rec.Code != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, wantStatus, rec.Body.Bytes())
	}
	if rec.Code == 204 {
		return map[string]any{}
	}
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: response.json() fails: %v: %q", method, path, err, rec.Body.Bytes())
	}
	return out
}

// TestJSSDKQueueStats: ojs-js-sdk src/queue.ts QueueOperations.stats returns the body itself as
// QueueStats {name, available, active, ...}, where the binding (§11.2) nests the counts under
// "stats": the answer carries both.
func TestJSSDKQueueStats(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	jsCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"email"}}`, 201)
	// QueueOperations.stats returns the body as QueueStats {name, available, active, scheduled,
	// retryable, completed, discarded, paused}.
	resp := jsCall(t, s, "GET", "/ojs/v1/queues/email/stats", "", 200)
	name, _ := resp["name"].(string)
	avail, _ := resp["available"].(float64)
	if name != "email" || avail != 1 {
		t.Fatalf("the SDK reads stats.name=%v stats.available=%v from %v", resp["name"], resp["available"], resp)
	}
}

// TestJSSDKNestedWorkflow: ojs-js-sdk src/workflow.ts toWireStep sends a nested group/chain/batch
// as a workflow object in a chain's steps (chain(a, group(b, c), d)), which ojs-workflows.md §10
// allows (TestNestedWorkflow checks how it runs).
func TestJSSDKNestedWorkflow(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	// chain(step, group(a, b), step): the nested group goes on the wire as a workflow object.
	body := `{"type":"chain","steps":[{"type":"a.one","args":[]},{"type":"group","jobs":[{"type":"a.two","args":[]},{"type":"a.three","args":[]}]},{"type":"a.four","args":[]}]}`
	resp := jsCall(t, s, "POST", "/ojs/v1/workflows", body, 201)
	if wf, _ := resp["workflow"].(map[string]any); wf == nil {
		t.Fatalf("nested: %v", resp)
	}
}

// pyJSON is the Python SDK's parse without its Content-Type check, to test the other fields.
func pyJSON(t *testing.T, h http.Handler, method, path, body string, wantStatus int) map[string]any {
	t.Helper()
	rec := wireCall(t, h, "1.0", method, path, body)
	if rec.Code != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, wantStatus, rec.Body.Bytes())
	}
	var out map[string]any
	if rec.Code != 204 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return out
}

// TestPythonSDKUniqueKeyDimensions: ojs-python-sdk src/ojs/job.py UniquePolicy.to_dict sends the
// uniqueness dimensions (default type, queue, args) under "key", where the Go SDK sends args fields
// (the spec, ojs-unique-jobs.md §2, names the dimensions "keys" and has no "key"). A key of
// dimensions only that the args do not all carry as fields is read as the Python SDK's.
func TestPythonSDKUniqueKeyDimensions(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	// enqueue(..., unique=UniquePolicy(period="PT1H")): UniquePolicy.to_dict sends its keys
	// (dimensions, default type/queue/args) under "key".
	body := func(to string) string {
		return `{"type": "email.send", "args": ["` + to + `"], "options": {"unique": {"on_conflict": "reject", "key": ["type", "queue", "args"], "period": "PT1H", "states": ["available", "active", "scheduled"]}}}`
	}
	pyJSON(t, s, "POST", "/ojs/v1/jobs", body("a@example.com"), 201)
	pyJSON(t, s, "POST", "/ojs/v1/jobs", body("b@example.com"), 201)
	r := call(t, s, "POST", "/ojs/v1/jobs", body("a@example.com"))
	checkErrorBody(t, r, 409, CodeDuplicate)

	// The same names as args fields keep the Go SDK's reading: a key over args.type only.
	goForm := func(typ, to string) string {
		return `{"type": "email.send", "args": [{"type": "` + typ + `", "to": "` + to + `"}], "options": {"unique": {"key": ["type"]}}}`
	}
	pyJSON(t, s, "POST", "/ojs/v1/jobs", goForm("welcome", "a"), 201)
	pyJSON(t, s, "POST", "/ojs/v1/jobs", goForm("digest", "a"), 201)
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", goForm("welcome", "b")), 409, CodeDuplicate)
	// meta needs meta_keys, which the key form cannot carry.
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type": "email.send", "args": [1], "options": {"unique": {"key": ["type", "meta"]}}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
}

// TestPythonSDKBatchCallbacks: ojs-python-sdk src/ojs/workflow.py batch() sends its callbacks as
// steps of the binding's form that depend on every job, with options.callback_type naming the
// condition (no spec defines it): they run as the callbacks they stand for, so a failed job
// releases on_failure and on_complete, not on_success.
func TestPythonSDKBatchCallbacks(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	body := `{"name": "b", "steps": [{"id": "step-0", "type": "email.send", "args": ["a"], "depends_on": []}, {"id": "step-1", "type": "email.send", "args": ["b"], "depends_on": []}, {"id": "on_complete", "type": "batch.report", "args": [], "depends_on": ["step-0", "step-1"], "options": {"callback_type": "on_complete"}}, {"id": "on_failure", "type": "batch.alert", "args": [], "depends_on": ["step-0", "step-1"], "options": {"callback_type": "on_failure"}}, {"id": "on_success", "type": "batch.done", "args": [], "depends_on": ["step-0", "step-1"], "options": {"callback_type": "on_success", "queue": "default"}}]}`
	resp := pyJSON(t, s, "POST", "/ojs/v1/workflows", body, 201)
	wfID := resp["workflow"].(map[string]any)["id"].(string)
	f := pyJSON(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues": ["default"], "count": 5, "visibility_timeout_ms": 30000, "worker_id": "w"}`, 200)
	jobs := f["jobs"].([]any)
	if len(jobs) != 2 {
		t.Fatalf("fetched %d jobs, want the 2 steps (the callbacks wait): %v", len(jobs), f)
	}
	pyJSON(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id": "`+jobs[0].(map[string]any)["id"].(string)+`"}`, 200)
	pyJSON(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id": "`+jobs[1].(map[string]any)["id"].(string)+`", "error": {"code": "handler_error", "message": "x", "retryable": false}}`, 200)
	resp = pyJSON(t, s, "GET", "/ojs/v1/workflows/"+wfID, "", 200)
	states := map[string]any{}
	for _, st := range resp["workflow"].(map[string]any)["steps"].([]any) {
		m := st.(map[string]any)
		states[m["id"].(string)] = m["state"]
	}
	if states["on_failure"] != "available" || states["on_complete"] != "available" || states["on_success"] != "cancelled" {
		t.Fatalf("after a failed job the callbacks are %v, want on_failure and on_complete available, on_success cancelled", states)
	}

	// A callback_type step must wait for every step before it; no step may wait for a callback.
	for body, field := range map[string]string{
		`{"steps": [{"id": "a", "type": "x.y", "args": [], "depends_on": []}, {"id": "b", "type": "x.y", "args": [], "depends_on": []}, {"id": "cb", "type": "x.y", "args": [], "depends_on": ["a"], "options": {"callback_type": "on_failure"}}]}`:     "steps[2].depends_on",
		`{"steps": [{"id": "a", "type": "x.y", "args": [], "depends_on": []}, {"id": "cb", "type": "x.y", "args": [], "depends_on": ["a"], "options": {"callback_type": "on_failure"}}, {"id": "c", "type": "x.y", "args": [], "depends_on": ["cb"]}]}`: "steps[2].depends_on",
		`{"steps": [{"id": "a", "type": "x.y", "args": [], "depends_on": []}, {"id": "cb", "type": "x.y", "args": [], "depends_on": ["a"], "options": {"callback_type": "later"}}]}`:                                                                    "steps[1].options.callback_type",
	} {
		r := call(t, s, "POST", "/ojs/v1/workflows", body)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if f := errField(r); f != field {
			t.Fatalf("%s: field %q, want %q: %s", body, f, field, r.raw)
		}
	}
}
