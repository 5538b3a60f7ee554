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
