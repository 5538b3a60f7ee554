package server

import (
	"strings"
	"testing"
)

// TestDeadLetterRetryWithOverride, on every store: a dead-letter job retried with an override
// (ojs-dead-letter.md 6.3) comes back as a new available job with the new args, queue, priority,
// attempts and meta merged over the old, the old one gone; a plain retry keeps working with or
// without a body; bad overrides are 400 naming the field.
func TestDeadLetterRetryWithOverride(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			dead := func() string {
				id := enqueueJob(t, s, `{"type":"mail.send","args":[1],"meta":{"origin":"web","keep":true},"options":{"queue":"dlo","priority":2,"tags":["t1"],"retry":{"max_attempts":1}}}`)
				if got := fetchOneID(t, s, "dlo"); got != id {
					t.Fatalf("fetched %s, want %s", got, id)
				}
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"type":"Bad","message":"no"}}`)
				return id
			}
			old := dead()
			for body, field := range map[string]string{
				`{"override":{"args":{"a":1}}}`:             "override.args",
				`{"override":{"queue":"Bad Queue"}}`:        "override.queue",
				`{"override":{"meta":[1]}}`:                 "override.meta",
				`{"override":{"priority":"urgent"}}`:        "override.priority",
				`{"override":{"retry":{"max_attempts":0}}}`: "override.retry.max_attempts",
				`{"override":{"retry":{"backoff":"x"}}}`:    "override.retry.backoff",
				`{"override":{"scheduled_at":"now"}}`:       "override.scheduled_at",
				`{"override":[1]}`:                          "override",
				`{"replay":true}`:                           "replay",
			} {
				r := call(t, s, "POST", "/ojs/v1/dead-letter/"+old+"/retry", body)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if !strings.Contains(string(r.raw), field) {
					t.Fatalf("%s: the error does not name %s: %s", body, field, r.raw)
				}
			}
			r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/"+old+"/retry",
				`{"override":{"args":[2,"x"],"queue":"dlo-retry","meta":{"retry_source":"manual_dlq_retry","origin":"ops"},"priority":7,"retry":{"max_attempts":3}}}`)
			j := r.body["job"].(map[string]any)
			if j["retried_from"] != old || j["id"] == old {
				t.Fatalf("retry with override: %s", r.raw)
			}
			if j["state"] != "available" || j["queue"] != "dlo-retry" || j["priority"] != 7.0 || j["max_attempts"] != 3.0 ||
				j["attempt"] != 0.0 {
				t.Fatalf("retried job: %s", r.raw)
			}
			if rp := j["retry"].(map[string]any); rp["max_attempts"] != 3.0 {
				t.Fatalf("the retry policy keeps the old budget: %s", r.raw)
			}
			got := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+j["id"].(string), nil).body["job"].(map[string]any)
			if args := got["args"].([]any); len(args) != 2 || args[0] != 2.0 || args[1] != "x" {
				t.Fatalf("args: %v", got["args"])
			}
			meta := got["meta"].(map[string]any)
			if meta["retry_source"] != "manual_dlq_retry" || meta["origin"] != "ops" || meta["keep"] != true || meta["retried_from"] != old {
				t.Fatalf("meta: %v", meta)
			}
			if tags, _ := got["tags"].([]any); len(tags) != 1 || tags[0] != "t1" {
				t.Fatalf("tags: %v", got["tags"])
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/"+old, nil), 404, "")
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/dead-letter/"+j["id"].(string)+"/retry", `{"override":{"priority":1}}`), 409, CodeConflict)

			// A plain retry, with no body or an empty one, keeps the job.
			for _, body := range []any{nil, `{}`, `{"override":null}`} {
				id := dead()
				r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/"+id+"/retry", body)
				if j := r.body["job"].(map[string]any); j["id"] != id || j["state"] != "available" || j["retried_from"] != nil {
					t.Fatalf("plain retry: %s", r.raw)
				}
				mustCall(t, s, 200, "DELETE", "/ojs/v1/jobs/"+id, nil)
			}
		})
	}
}
