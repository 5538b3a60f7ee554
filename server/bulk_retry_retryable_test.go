package server

import (
	"testing"
)

// TestBulkRetryRetryableJob: ojs-bulk-operations.md 7, "Bulk retry transitions jobs from
// `discarded` or `retryable` states back to `available`". A job waiting out a long backoff
// (retryable) was skipped ("job is in state retryable", 422). It is made available now, keeping
// the attempt it used; a filter without state matches retryable jobs too; a discarded job is still
// retried with its attempts reset, and a completed one still skipped.
func TestBulkRetryRetryableJob(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		retryable := func(queue string) string {
			enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"`+queue+`","retry":{"max_attempts":3,"initial_interval":"PT1H"}}}`)
			j := fetchFrom(t, s, queue)
			if n := nackFetched(t, s, j, `{"code":"x","message":"boom"}`); n.body["state"] != "retryable" {
				t.Fatalf("nack: %d %s", n.status, n.raw)
			}
			return j["id"].(string)
		}
		id := retryable("rr")
		r := call(t, s, "POST", "/ojs/v1/jobs/bulk/retry", `{"job_ids":["`+id+`"]}`)
		if r.status != 200 || r.body["retried"] != 1.0 {
			t.Fatalf("bulk retry of a retryable job: %d %s, want 200 with the job retried", r.status, r.raw)
		}
		g := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
		if g["state"] != "available" || g["attempt"] != 1.0 {
			t.Fatalf("job after bulk retry: state %v attempt %v, want available keeping attempt 1", g["state"], g["attempt"])
		}

		// By filter, without state: the retryable and the discarded job of the queue.
		other := retryable("rf")
		dead := discardOne(t, s, "a.b", "rf")
		r = mustCall(t, s, 200, "POST", "/ojs/v1/jobs/bulk/retry", `{"filter":{"queue":"rf"}}`)
		if r.body["retried"] != 2.0 {
			t.Fatalf("bulk retry by filter: %s, want the retryable and the discarded job", r.raw)
		}
		if st := jobState(t, s, other); st != "available" {
			t.Fatalf("retryable job is %s after bulk retry by filter", st)
		}
		d := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+dead, nil).body["job"].(map[string]any)
		if d["state"] != "available" || d["attempt"] != 0.0 {
			t.Fatalf("discarded job after bulk retry: state %v attempt %v, want available with its attempts reset", d["state"], d["attempt"])
		}

		// A completed job is still skipped.
		enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"rc"}}`)
		c := fetchFrom(t, s, "rc")
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+c["id"].(string)+`","worker_id":"w","claim_token":"`+c["claim_token"].(string)+`"}`)
		r = call(t, s, "POST", "/ojs/v1/jobs/bulk/retry", `{"job_ids":["`+c["id"].(string)+`"]}`)
		if r.status != 422 || r.body["skipped"] != 1.0 {
			t.Fatalf("bulk retry of a completed job: %d %s, want it skipped", r.status, r.raw)
		}
	})
}
