package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestOJSVersionHeaderNegotiation: ojs-http-binding.md §3.2, "If a client requests a version the
// server does not support, the server MUST respond with 422 Unprocessable Entity and an error code
// of unsupported." A client asking for OJS-Version 2.0 used to get its job enqueued under 1.0 rules.
// The 1.0 spellings SDKs send are served; the manifest answers every client, so it can learn what
// the server speaks.
func TestOJSVersionHeaderNegotiation(t *testing.T) {
	s, _ := storeServer(t, "memory", Config{})
	for _, v := range []string{"2.0", "1.1", "0.9", "latest"} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"queue":"v2"}`, "OJS-Version", v)
		checkErrorBody(t, r, 422, CodeUnsupported)
		if !strings.Contains(r.body["error"].(map[string]any)["message"].(string), "1.0") {
			t.Errorf("OJS-Version %q: the refusal does not say which version the server speaks: %s", v, r.raw)
		}
	}
	r := mustCall(t, s, 200, "GET", "/ojs/v1/queues/v2/stats", nil)
	if n := r.body["queue"].(map[string]any)["available"]; n != float64(0) {
		t.Fatalf("a refused enqueue stored a job: %s", r.raw)
	}
	for _, v := range []string{"1.0", "1", "1.0.0", "1.0.0-rc.1", " 1.0 ", ""} {
		mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, "OJS-Version", v)
	}
	r = mustCall(t, s, 200, "GET", "/ojs/manifest", nil, "OJS-Version", "2.0")
	if r.header.Get("OJS-Version") != "1.0" {
		t.Fatalf("manifest answered OJS-Version %q, want 1.0", r.header.Get("OJS-Version"))
	}
}

// TestTooLargeBodyNamesItsSize: a body whose Content-Length is over the limit gets 413 naming both
// the limit and its size (ojs-json-format.md §8.1); it used to name the limit only.
func TestTooLargeBodyNamesItsSize(t *testing.T) {
	s, _ := storeServer(t, "memory", Config{MaxBodyBytes: 1000})
	body := `{"type":"a.b","args":["` + strings.Repeat("x", 2000) + `"]}`
	r := call(t, s, "POST", "/ojs/v1/jobs", body)
	checkErrorBody(t, r, 413, CodePayloadTooLarge)
	d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	if d["max_bytes"] != float64(1000) || d["actual_bytes"] != float64(len(body)) {
		t.Fatalf("413 details %v, want max_bytes 1000 and actual_bytes %d", d, len(body))
	}
}

// TestUnknownAttributeNamedLikeAnAnswerField: an envelope attribute OJS does not define is kept and
// returned, but one named like a field an answer adds itself (claim_token on fetch, previous_state
// on cancel, activated_at on activate) used to be written beside it: the object held the key twice.
func TestUnknownAttributeNamedLikeAnAnswerField(t *testing.T) {
	s, _ := storeServer(t, "memory", Config{})
	noDuplicateKeys := func(what string, raw []byte) {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader(raw))
		var walk func() // each object's keys, once each
		walk = func() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("%s: %v: %s", what, err, raw)
			}
			switch tok {
			case json.Delim('{'):
				seen := map[string]bool{}
				for dec.More() {
					k, _ := dec.Token()
					if seen[k.(string)] {
						t.Fatalf("%s: key %q twice in one object: %s", what, k, raw)
					}
					seen[k.(string)] = true
					walk()
				}
				_, _ = dec.Token()
			case json.Delim('['):
				for dec.More() {
					walk()
				}
				_, _ = dec.Token()
			}
		}
		walk()
	}
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"queue":"dup","claim_token":"x","previous_state":"y"}`)
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["dup"],"worker_id":"w1"}`)
	noDuplicateKeys("fetch", r.raw)
	id := r.body["jobs"].([]any)[0].(map[string]any)["id"].(string)
	r = mustCall(t, s, 200, "DELETE", "/ojs/v1/jobs/"+id, nil)
	noDuplicateKeys("cancel", r.raw)
}
