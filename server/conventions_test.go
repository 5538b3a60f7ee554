package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMethodNotAllowedHasAllow: every 405 carries an Allow header naming the methods the path
// accepts, the same as details.allowed (RFC 9110 §15.5.6: "The origin server MUST generate an Allow
// header field in a 405 response"); only single-method routes used to.
func TestMethodNotAllowedHasAllow(t *testing.T) {
	s := serverOn(t, "memory")
	id := "019539a4-0000-7000-8000-000000000000"
	cases := []struct{ method, path, allow string }{
		{"POST", "/ojs/v1/queues", "GET"},
		{"PUT", "/ojs/v1/jobs/" + id, "GET, DELETE, PATCH"},
		{"POST", "/ojs/v1/jobs/" + id + "/progress", "GET, PUT"},
		{"PATCH", "/ojs/v1/cron", "GET, POST"},
		{"POST", "/ojs/v1/health", "GET, HEAD"},
		{"POST", "/ojs/v1/ready", "GET, HEAD"},
		{"DELETE", "/ojs/manifest", "GET"},
		{"POST", "/ojs/v1/dead-letter", "GET, DELETE"},
		{"POST", "/ojs/v1/rate-limits/k", "GET, PUT, DELETE"},
	}
	var bad []string
	for _, c := range cases {
		r := call(t, s, c.method, c.path, nil)
		checkErrorBody(t, r, 405, CodeMethodNotAllowed)
		var allowed []string
		for _, m := range r.body["error"].(map[string]any)["details"].(map[string]any)["allowed"].([]any) {
			allowed = append(allowed, m.(string))
		}
		got := r.header.Get("Allow")
		if got != c.allow || got != strings.Join(allowed, ", ") {
			bad = append(bad, fmt.Sprintf("%s %s: Allow %q, details.allowed %v, want %q", c.method, c.path, got, allowed, c.allow))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("405 answers:\n%s", strings.Join(bad, "\n"))
	}
}

// TestLoopbackGuardConventions: the guard's 403 for a foreign Host follows the API's conventions,
// as every answer does (docs/http-api.md, Conventions): OJS-Version, and the client's own
// X-Request-Id, also in error.request_id. It used to answer without OJS-Version and with an id of
// its own.
func TestLoopbackGuardConventions(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	h := LoopbackGuard(s, nil)
	for _, rid := range []string{"client-id-123", ""} {
		req := httptest.NewRequest("POST", "http://rebind.example:8080/ojs/v1/jobs", strings.NewReader(`{"type":"a.b","args":[]}`))
		req.Header.Set("Content-Type", "application/openjobspec+json")
		if rid != "" {
			req.Header.Set("X-Request-Id", rid)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Fatalf("foreign Host: %d %s", rec.Code, rec.Body.Bytes())
		}
		if v := rec.Header().Get("OJS-Version"); v != "1.0" {
			t.Errorf("OJS-Version %q, want 1.0", v)
		}
		got := rec.Header().Get("X-Request-Id")
		if rid != "" && got != rid || rid == "" && !strings.HasPrefix(got, "req_") {
			t.Errorf("X-Request-Id %q for the client's %q", got, rid)
		}
		var body struct {
			Error struct {
				Code      string `json:"code"`
				RequestID string `json:"request_id"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != CodeForbidden || body.Error.RequestID != got {
			t.Errorf("error body %s (%v): want code forbidden, request_id %q", rec.Body.Bytes(), err, got)
		}
	}
}
