package server

import (
	"testing"
)

// TestDeadLetterRetryFilterUnknownMember: POST /ojs/v1/dead-letter/retry takes the filter {"queue",
// "type", "since", "until", "error_type"}. A member the server does not know (a typo, or another
// SDK's name for the type such as "job_type") was dropped unread, so the filter became empty and
// the request re-enqueued every dead-letter job of every queue. It is refused with 400 naming it,
// as the replay rules and the bulk filters refuse theirs, and nothing is retried; so is an unknown
// member beside the filter.
func TestDeadLetterRetryFilterUnknownMember(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		a := discardOne(t, s, "billing.charge", "billing")
		b := discardOne(t, s, "mail.send", "mail")
		for body, field := range map[string]string{
			`{"filter":{"job_type":"report.build"},"confirm":true}`:    "filter.job_type",
			`{"filter":{"queue":"billing","Type":"x"},"confirm":true}`: "filter.Type",
			`{"filter":{},"queue":"billing","confirm":true}`:           "queue",
		} {
			r := call(t, s, "POST", "/ojs/v1/dead-letter/retry", body)
			for _, id := range []string{a, b} {
				if st := jobState(t, s, id); st != "discarded" {
					t.Fatalf("dead-letter job %s is %v after the retry %s (answer %d %s)", id, st, body, r.status, r.raw)
				}
			}
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if d, _ := r.body["error"].(map[string]any)["details"].(map[string]any); d == nil || d["field"] != field {
				t.Fatalf("%s: %s, want details.field %s", body, r.raw, field)
			}
		}
		// The known members still select: the billing job only.
		r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{"queue":"billing","error_type":"Boom"},"confirm":true}`)
		if r.body["succeeded"] != 1.0 || jobState(t, s, a) != "available" || jobState(t, s, b) != "discarded" {
			t.Fatalf("retry by a known filter: %s; states %s %s", r.raw, jobState(t, s, a), jobState(t, s, b))
		}
	})
}

// TestDeadLetterPurgeUnknownMember: DELETE /ojs/v1/dead-letter takes {"older_than", "confirm"}; a
// misspelt bound ("older_then") was dropped unread and the purge deleted every dead-letter job. It
// is refused with 400 naming it, nothing deleted.
func TestDeadLetterPurgeUnknownMember(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		id := discardOne(t, s, "billing.charge", "billing")
		for _, path := range []string{"/ojs/v1/dead-letter", "/ojs/v1/admin/dead-letter"} {
			r := call(t, s, "DELETE", path, `{"confirm":true,"older_then":"2000-01-01T00:00:00Z"}`)
			if st := jobState(t, s, id); st != "discarded" {
				t.Fatalf("DELETE %s with an unknown member left the dead-letter job %q (answer %d %s)", path, st, r.status, r.raw)
			}
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if d, _ := r.body["error"].(map[string]any)["details"].(map[string]any); d == nil || d["field"] != "older_then" {
				t.Fatalf("DELETE %s: %s, want details.field older_then", path, r.raw)
			}
		}
	})
}
