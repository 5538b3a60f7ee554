package server

import (
	"strings"
	"testing"
)

// TestEventCursorOfAnotherServerRefused: GET /ojs/v1/events?after= takes an event id of this
// server's log. The last cursor a consumer got from another replica, or from this server before a
// restart (whose sequence starts again at 1), names no position here: it is refused 400 naming
// after, where it used to skip this server's events up to its sequence number silently.
func TestEventCursorOfAnotherServerRefused(t *testing.T) {
	a, _ := newTestServer(t, Config{})
	b, _ := newTestServer(t, Config{})
	for range 20 {
		mustCall(t, a, 201, "POST", "/ojs/v1/jobs", `{"type":"cursor.ev","args":[]}`)
	}
	r := mustCall(t, a, 200, "GET", "/ojs/v1/events?limit=1000", nil)
	cursor, _ := r.body["cursor"].(string)
	if cursor == "" {
		t.Fatalf("no cursor from server a: %s", r.raw)
	}
	for range 3 {
		mustCall(t, b, 201, "POST", "/ojs/v1/jobs", `{"type":"cursor.ev","args":[]}`)
	}
	r = call(t, b, "GET", "/ojs/v1/events?limit=1000&after="+cursor, nil)
	wantErrorField(t, r, 400, "", "after")
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "not an event id of this server") {
		t.Fatalf("message %q", msg)
	}

	// A's own cursor still pages on a; one beyond its log (a forged sequence) is refused.
	mustCall(t, a, 201, "POST", "/ojs/v1/jobs", `{"type":"cursor.ev","args":[]}`)
	r = mustCall(t, a, 200, "GET", "/ojs/v1/events?limit=1000&after="+cursor, nil)
	if n := len(r.body["events"].([]any)); n == 0 {
		t.Fatalf("after=%s on its own server answered no newer event: %s", cursor, r.raw)
	}
	ahead := cursor[:28] + "ffffffffffff"
	wantErrorField(t, call(t, a, "GET", "/ojs/v1/events?after="+ahead, nil), 400, "", "after")
}
