package server

import (
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestDeadLetterRetentionAPI, on every store: per-queue dead-letter retentions are stored whole,
// read back (also under /admin), refused with a 400 naming the field when malformed, and removed by
// an empty object.
func TestDeadLetterRetentionAPI(t *testing.T) {
	const path = "/ojs/v1/dead-letter/retention"
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			if r := mustCall(t, s, 200, "GET", path, nil); len(r.body["queues"].(map[string]any)) != 0 {
				t.Fatalf("none yet: %s", r.raw)
			}
			for body, field := range map[string]string{
				`{}`: "queues",
				`{"queues":{"bad queue!":{"max_count":1}}}`:                  "queues.bad queue!",
				`{"queues":{"q":{}}}`:                                        "queues.q",
				`{"queues":{"q":{"max_age":"soon"}}}`:                        "queues.q.max_age",
				`{"queues":{"q":{"max_age":"PT0S"}}}`:                        "queues.q.max_age",
				`{"queues":{"q":{"max_count":-1}}}`:                          "queues.q.max_count",
				`{"queues":{"q":{"max_count":1,"policy":"archive"}}}`:        "queues.q",
				`{"queues":{"q":{"max_count":1}},"default":{"max_count":2}}`: "",
				`{"queues":{"q":{"max_count":1,"pruning_policy":"shred"}}}`:  "queues.q.pruning_policy",
				// This server's client has no archive: it could not apply the policy.
				`{"queues":{"q":{"max_count":1,"pruning_policy":"archive"}}}`: "",
			} {
				r := call(t, s, "PUT", path, body)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if field != "" {
					if details, _ := r.body["error"].(map[string]any)["details"].(map[string]any); details == nil || details["field"] != field {
						t.Errorf("PUT %s: %s, want the error to name %s", body, r.raw, field)
					}
				}
			}
			checkErrorBody(t, call(t, s, "POST", path, `{}`), 405, CodeMethodNotAllowed)

			put := mustCall(t, s, 200, "PUT", path, `{"queues":{"billing":{"max_age":"P365D","max_count":50000},"mail":{"max_count":10,"pruning_policy":"delete"}}}`)
			for _, r := range []*response{put, mustCall(t, s, 200, "GET", path, nil), mustCall(t, s, 200, "GET", "/ojs/v1/admin/dead-letter/retention", nil)} {
				qs := r.body["queues"].(map[string]any)
				billing, _ := qs["billing"].(map[string]any)
				mail, _ := qs["mail"].(map[string]any)
				if len(qs) != 2 || billing["max_age"] != "P365D" || billing["max_count"] != 50000.0 || mail["max_count"] != 10.0 || mail["max_age"] != nil ||
					mail["pruning_policy"] != "delete" || billing["pruning_policy"] != nil {
					t.Fatalf("stored: %s", r.raw)
				}
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/dead-letter/retention", `{"queues":{}}`)
			if r := mustCall(t, s, 200, "GET", path, nil); len(r.body["queues"].(map[string]any)) != 0 {
				t.Fatalf("after removing: %s", r.raw)
			}
		})
	}
}

// TestDeadLetterRetentionArchivePolicy: a server whose client has a dead letter archive accepts and
// returns pruning_policy archive (ojs-dead-letter.md 8.2).
func TestDeadLetterRetentionArchivePolicy(t *testing.T) {
	archive, err := NewFileArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	client, err := pronto.NewClient(memory.New(), &pronto.Config{DeadLetterArchive: archive})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	r := mustCall(t, s, 200, "PUT", "/ojs/v1/dead-letter/retention", `{"queues":{"billing":{"max_age":"P365D","pruning_policy":"archive"}}}`)
	if b, _ := r.body["queues"].(map[string]any)["billing"].(map[string]any); b["pruning_policy"] != "archive" {
		t.Fatalf("stored: %s", r.raw)
	}
}
