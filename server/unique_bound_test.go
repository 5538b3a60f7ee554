package server

import (
	"net/http"
	"testing"
)

// TestDuplicateAtBoundIsDeduplicated: docs/http-api.md "Backpressure": "An enqueue that stores
// nothing takes no room: a unique duplicate (200 deduplicated)". A queue at its bound (max depth 1,
// holding one unique job) answers the same unique job 200 deduplicated under on_conflict ignore and
// 409 duplicate under reject, not 429 queue_full; a job that would be stored still gets 429. On
// every store.
func TestDuplicateAtBoundIsDeduplicated(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			mustCall(t, s, http.StatusOK, "PUT", "/ojs/v1/admin/queues/bq/config", `{"backpressure": {"max_depth": 1}}`)
			job := `{"type":"account.sync","args":[{"account_id":"acct-7"}],"options":{"queue":"bq","unique":{"keys":["type","args"],"on_conflict":"`
			first := mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs", job+`ignore"}}}`)
			r := call(t, s, "POST", "/ojs/v1/jobs", job+`ignore"}}}`)
			if r.status != http.StatusOK || r.body["deduplicated"] != true {
				t.Fatalf("duplicate (ignore) at the bound: %d %s", r.status, r.raw)
			}
			if got, want := r.body["job"].(map[string]any)["id"], first.body["job"].(map[string]any)["id"]; got != want {
				t.Fatalf("duplicate (ignore) answers job %v, want the holder %v", got, want)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", job+`reject"}}}`), http.StatusConflict, CodeDuplicate)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"account.sync","args":[{"account_id":"acct-8"}],"options":{"queue":"bq"}}`),
				http.StatusTooManyRequests, CodeQueueFull)
		})
	}
}
