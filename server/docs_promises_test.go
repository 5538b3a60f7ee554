package server

// Promises of the README and docs/ about the HTTP API that no other test held.

import (
	"fmt"
	"testing"
)

// readmeFetch fetches one job of queue for worker w with plain application/json, as README's
// curl lines do.
func readmeFetch(t *testing.T, s *Server, queue, worker string) map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":[%q],"worker_id":%q}`, queue, worker), "Content-Type", "application/json")
	jobs, _ := r.body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("fetch %s: want 1 job: %s", queue, r.raw)
	}
	return jobs[0].(map[string]any)
}

// TestReadmeHTTPFlowRuns runs README's "The HTTP API" curl lines.
func TestReadmeHTTPFlowRuns(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	ct := []string{"Content-Type", "application/json"}
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"to":"ada@example.com"}],"options":{"queue":"email"}}`, ct...)
	j := readmeFetch(t, s, "email", "w1")
	tok, _ := j["claim_token"].(string)
	if tok == "" {
		t.Fatalf("fetch gave no claim_token: %v", j)
	}
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w1","claim_token":%q,"result":{"sent":true}}`, j["id"], tok), ct...)
	if r.body["acknowledged"] != true || r.body["state"] != "completed" {
		t.Fatalf("ack: %s", r.raw)
	}

	// The chain: etl.load is fetched with parent_results [extract's result].
	r = mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{
  "type": "chain", "name": "etl",
  "steps": [{"type": "etl.extract", "args": [1]}, {"type": "etl.load", "args": [1]}]}`, ct...)
	wf := r.body["workflow"].(map[string]any)
	ex := readmeFetch(t, s, "default", "w1")
	if ex["type"] != "etl.extract" {
		t.Fatalf("first step: %v", ex)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w1","claim_token":%q,"result":{"rows":7}}`, ex["id"], ex["claim_token"]), ct...)
	ld := readmeFetch(t, s, "default", "w1")
	pr, _ := ld["parent_results"].([]any)
	if ld["type"] != "etl.load" || len(pr) != 1 || fmt.Sprint(pr[0]) != "map[rows:7]" {
		t.Fatalf("second step: %v", ld)
	}
	r = mustCall(t, s, 200, "GET", "/ojs/v1/workflows/"+wf["id"].(string), nil)
	w := r.body["workflow"].(map[string]any)
	for _, k := range []string{"state", "steps_total", "steps_completed"} {
		if _, ok := w[k]; !ok {
			t.Fatalf("workflow has no %s: %s", k, r.raw)
		}
	}

	// Unique: the same request again answers 409 duplicate with existing_job_id.
	uniq := `{"type": "account.sync", "args": [{"account_id": "acct-7"}],
  "options": {"unique": {"keys": ["type", "args"], "on_conflict": "reject", "period": "PT10M"}}}`
	first := mustCall(t, s, 201, "POST", "/ojs/v1/jobs", uniq, ct...)
	r = call(t, s, "POST", "/ojs/v1/jobs", uniq, ct...)
	checkErrorBody(t, r, 409, "duplicate")
	d := r.body["error"].(map[string]any)["details"].(map[string]any)
	if d["existing_job_id"] != first.body["job"].(map[string]any)["id"] {
		t.Fatalf("existing_job_id: %s", r.raw)
	}

	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type": "partner.call", "args": [],
  "options": {"rate_limit": {"key": "partner-api", "concurrency": 5, "rate": {"limit": 100, "period": "PT1M"}}}}`, ct...)
	r = mustCall(t, s, 200, "GET", "/ojs/v1/rate-limits/partner-api", nil)
	if r.status != 200 {
		t.Fatalf("rate limit: %s", r.raw)
	}
}
