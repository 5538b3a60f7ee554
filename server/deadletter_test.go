package server

import (
	"testing"
	"time"
)

// countEvents returns how many events of type typ the events API holds.
func countEvents(t *testing.T, s *Server, typ string) int {
	t.Helper()
	return len(mustCall(t, s, 200, "GET", "/ojs/v1/events?types="+typ, nil).body["events"].([]any))
}

// TestDeadLetterAdditions, on every store: a dead-letter entry's detail, bulk retry by error type
// (confirm required), purge on the data plane, and the dead_letter.* events.
func TestDeadLetterAdditions(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			var ids []string
			for _, typ := range []string{"SMTPError", "SMTPTimeout", "DNSError"} {
				id := enqueueJob(t, s, `{"type":"mail.send","args":[],"options":{"queue":"dlq","retry":{"max_attempts":1}}}`)
				if got := fetchOneID(t, s, "dlq"); got != id {
					t.Fatalf("fetched %s, want %s", got, id)
				}
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"type":"`+typ+`","message":"refused"}}`)
				ids = append(ids, id)
			}
			live := enqueueJob(t, s, `{"type":"mail.send","args":[],"options":{"queue":"dlq"}}`)

			one := mustCall(t, s, 200, "GET", "/ojs/v1/dead-letter/"+ids[2], nil).body["job"].(map[string]any)
			if one["state"] != "discarded" || one["errors"].([]any)[0].(map[string]any)["type"] != "DNSError" {
				t.Fatalf("dead-letter detail: %v", one)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/dead-letter/"+live, nil), 409, CodeConflict)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{}}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/dead-letter/retry", `{"confirm":true}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{"since":"yesterday"},"confirm":true}`), 400, CodeInvalidRequest)

			r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{"queue":"dlq","error_type":"SMTP*"},"confirm":true}`)
			if r.body["matched"] != 2.0 || r.body["succeeded"] != 2.0 || r.body["failed"] != 0.0 {
				t.Fatalf("bulk retry: %s", r.raw)
			}
			for _, id := range ids[:2] {
				if st := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)["state"]; st != "available" {
					t.Fatalf("retried job %s is %v", id, st)
				}
			}
			future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			if r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{"since":"`+future+`"},"confirm":true}`); r.body["matched"] != 0.0 {
				t.Fatalf("since bounds the discard time: %s", r.raw)
			}

			deadline := time.Now().Add(15 * time.Second)
			for countEvents(t, s, "dead_letter.added") < 3 {
				if time.Now().After(deadline) {
					t.Fatal("dead_letter.added: fewer than 3 events")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := countEvents(t, s, "dead_letter.retried"); n != 2 {
				t.Fatalf("dead_letter.retried: %d events", n)
			}
			mustCall(t, s, 200, "DELETE", "/ojs/v1/dead-letter/"+ids[2], nil)
			if n := countEvents(t, s, "dead_letter.deleted"); n != 1 {
				t.Fatalf("dead_letter.deleted: %d events", n)
			}

			// Purge on the data plane (as DELETE /ojs/v1/admin/dead-letter).
			again := enqueueJob(t, s, `{"type":"mail.send","args":[],"options":{"queue":"dlq2","retry":{"max_attempts":1}}}`)
			fetchOneID(t, s, "dlq2")
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+again+`","worker_id":"w1","error":{"message":"x"}}`)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/dead-letter", `{}`), 400, CodeInvalidRequest)
			if p := mustCall(t, s, 200, "DELETE", "/ojs/v1/dead-letter", `{"confirm":true}`); p.body["purged_count"] != 1.0 {
				t.Fatalf("purge: %s", p.raw)
			}
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/dead-letter", nil), 405, CodeMethodNotAllowed)
		})
	}
}
