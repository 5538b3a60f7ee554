package server

import (
	"fmt"
	"testing"
)

// TestOptionsTimeoutWithNullTimeoutMS: options.timeout (whole seconds) applies when options.timeout_ms
// is present but null, as a null member is absent everywhere else in options. The null timeout_ms
// was skipped, yet its presence kept timeout from applying: the job had no timeout at all.
func TestOptionsTimeoutWithNullTimeoutMS(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for body, want := range map[string]string{
		`{"type":"t.t","args":[],"options":{"timeout":30,"timeout_ms":null}}`: "30000",
		`{"type":"t.t","args":[],"options":{"timeout":30,"timeout_ms":1500}}`: "1500",
		`{"type":"t.t","args":[],"options":{"timeout":30}}`:                   "30000",
		`{"type":"t.t","args":[],"options":{"timeout_ms":null,"timeout":2}}`:  "2000",
	} {
		id := enqueueJob(t, s, body)
		r := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil)
		if got := fmt.Sprint(r.body["job"].(map[string]any)["timeout_ms"]); got != want {
			t.Errorf("%s: timeout_ms %s, want %s", body, got, want)
		}
	}
}
