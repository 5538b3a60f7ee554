package server

import (
	"strings"
	"testing"
)

// TestUppercaseJobIDLookups: ojs-json-format.md 6.2 says implementations "MUST accept uppercase hex
// on input but MUST produce lowercase hex on output", and the conformance case L0-ENV-011 that a new
// job's id in uppercase is refused; where they disagree the case wins, so an enqueue with an
// uppercase id is a 400, while every lookup of an existing job or workflow takes its id in either
// case (as .NET's Guid.ToString("D").ToUpper(), SQL Server and many loggers print it): answers carry
// it in lowercase, and an error shows the id as sent.
func TestUppercaseJobIDLookups(t *testing.T) {
	s, _ := storeServer(t, "memory", Config{})
	const lower = "019539a4-b68c-7def-8000-1a2b3c4d5e6f"
	upper := strings.ToUpper(lower)
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"id":"`+upper+`","options":{"queue":"up"}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"id":"`+lower+`","options":{"queue":"up"}}`)
	r = call(t, s, "GET", "/ojs/v1/jobs/"+upper, nil)
	if r.status != 200 || r.body["job"].(map[string]any)["id"] != lower {
		t.Fatalf("GET by the uppercase id: status %d, want 200 with the lowercase id: %s", r.status, r.raw)
	}
	mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs/"+upper, nil)

	// A worker naming the job in uppercase: heartbeat and ack.
	j := fetchOne(t, s, "up")
	hb := mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w","active_job_ids":["`+upper+`"]}`)
	if lost, _ := hb.body["jobs_lost"].([]any); len(lost) != 0 {
		t.Fatalf("heartbeat by the uppercase id: %s, want the job kept", hb.raw)
	}
	a := mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+upper+`","worker_id":"w","claim_token":"`+j["claim_token"].(string)+`"}`)
	if a.body["state"] != "completed" {
		t.Fatalf("ack by the uppercase id: %s", a.raw)
	}

	// Bulk ids, and a workflow by its id in uppercase.
	r = mustCall(t, s, 200, "POST", "/ojs/v1/jobs/bulk/delete", `{"job_ids":["`+upper+`"]}`)
	if items := r.body["items"].([]any); items[0].(map[string]any)["job_id"] != lower {
		t.Fatalf("bulk delete by the uppercase id: %s", r.raw)
	}
	wf := mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[{"type":"a.b","args":[]}]}`)
	wid := wf.body["workflow"].(map[string]any)["id"].(string)
	g := mustCall(t, s, 200, "GET", "/ojs/v1/workflows/"+strings.ToUpper(wid), nil)
	if g.body["workflow"].(map[string]any)["id"] != wid {
		t.Fatalf("workflow by the uppercase id: %s", g.raw)
	}

	// An id that is not a UUIDv7 in any case is refused, shown as sent.
	bad := "019539A4-B68C-6DEF-8000-1A2B3C4D5E6F"
	r = call(t, s, "GET", "/ojs/v1/jobs/"+bad, nil)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, bad) {
		t.Fatalf("error %q does not show the id as sent", msg)
	}
	// So is such an id at enqueue, as the conformance case L0-ENV-011 checks.
	for _, id := range []string{"550e8400-e29b-41d4-a716-446655440000", "550E8400-E29B-41D4-A716-446655440000",
		"not-a-uuid-at-all", "", "019539a4-b68c-7def-c000-1a2b3c4d5e6f", "019539a4b68c7def80001a2b3c4d5e6f"} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"id":"`+id+`"}`)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if d, _ := r.body["error"].(map[string]any)["details"].(map[string]any); d == nil || d["field"] != "id" {
			t.Fatalf("id %q: %s, want details.field id", id, r.raw)
		}
	}
}
