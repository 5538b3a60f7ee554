package server

import (
	"testing"
)

// TestWorkflowQueueFullHTTP: POST /ojs/v1/workflows into a queue at its maximum depth answers
// 429 queue_full like POST /ojs/v1/jobs and /jobs/batch (ojs-backpressure.md §5.1, §7.1).
func TestWorkflowQueueFullHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := serverOn(t, kind)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/queues/wfq/config", `{"backpressure":{"max_depth":1}}`)
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"wfq"}}`)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"wfq"}}`), 429, CodeQueueFull)
			r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"etl","options":{"queue":"wfq"},
				"steps":[{"type":"etl.extract","args":[1]},{"type":"etl.load","args":[2]}]}`)
			if r.status != 429 {
				t.Fatalf("a workflow into the full queue wfq (depth 1 of 1): %d %s", r.status, r.raw)
			}
		})
	}
}

// TestRateLimitShortPeriodRefused: PUT /ojs/v1/rate-limits/{key} with a rate period under a
// millisecond ("PT0.0000001S") is refused 400 on every store. It used to answer 200 everywhere while
// SQLite, PostgreSQL and Redis, which keep whole microseconds, stored a limit with no bound at all.
func TestRateLimitShortPeriodRefused(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := serverOn(t, kind)
			for _, p := range []struct{ path, body, field string }{
				{"/ojs/v1/rate-limits/k", `{"rate":{"limit":5,"period":"PT0.0000001S"}}`, "rate"},
			} {
				r := call(t, s, "PUT", p.path, p.body)
				if r.status >= 400 && r.status < 500 {
					continue
				}
				if r.status != 200 || r.body[p.field] == nil {
					t.Errorf("PUT %s %s: %d %s: the limit was accepted but stored without its rate", p.path, p.body, r.status, r.raw)
				}
				if g := call(t, s, "GET", p.path, nil); g.status == 200 && g.body[p.field] == nil {
					t.Errorf("GET %s after the PUT: %s (a stored limit with no bound)", p.path, g.raw)
				}
			}
		})
	}
}
