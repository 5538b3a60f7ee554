package server

import "testing"

// TestTagFilters: the bulk filter's "tags" and the dead-letter list's ?tags= select the jobs that have
// every given tag (pronto's extension).
func TestTagFilters(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	vip := enqueueIn(t, s, "t", `,"tags":["vip","eu"]`)
	enqueueIn(t, s, "t", `,"tags":["eu"]`)
	enqueueIn(t, s, "t", "")
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"t","tags":["eu","vip"]}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "cancelled": 1})
	if bulkItems(t, r, 1)[0]["job_id"] != vip {
		t.Fatalf("tags filter: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"t","tags":["eu"]}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "cancelled": 1})
	for _, bad := range []string{`{"filter":{"tags":[]}}`, `{"filter":{"tags":"eu"}}`, `{"filter":{"tags":[""]}}`} {
		if r := call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", bad); r.status != 400 {
			t.Errorf("%s: %d %s", bad, r.status, r.raw)
		}
	}

	// Dead letters by tag.
	for _, tags := range []string{`["vip"]`, `["other"]`} {
		enqueueIn(t, s, "dl", `,"tags":`+tags)
		id := fetchOne(t, s, "dl")["id"].(string)
		r := call(t, s, "POST", "/ojs/v1/workers/nack",
			`{"job_id":"`+id+`","worker_id":"w","error":{"code":"x","message":"hopeless","retryable":false}}`)
		if r.status != 200 {
			t.Fatalf("nack: %d %s", r.status, r.raw)
		}
	}
	r = call(t, s, "GET", "/ojs/v1/dead-letter?tags=vip", nil)
	jobs, _ := r.body["jobs"].([]any)
	if r.status != 200 || len(jobs) != 1 {
		t.Fatalf("dead-letter?tags=vip: %d %s", r.status, r.raw)
	}
}
