package server

import (
	"strings"
	"testing"
)

// TestNamedPriorities: a priority may be given as OJS's named levels ("high" 10, "normal" 0, "low"
// -10, any case; ojs-core.md) wherever the API takes one: options.priority, the top-level priority,
// a workflow step's options, a dead-letter retry's override and a bulk filter. Any other name is a
// 400 naming the field and the names it takes.
func TestNamedPriorities(t *testing.T) {
	s := serverOn(t, "memory")
	for body, want := range map[string]float64{
		`{"type":"a.b","args":[],"options":{"priority":"high"}}`:   10,
		`{"type":"a.b","args":[],"options":{"priority":"LOW"}}`:    -10,
		`{"type":"a.b","args":[],"options":{"priority":"Normal"}}`: 0,
		`{"type":"a.b","args":[],"priority":"high"}`:               10,
		`{"type":"a.b","args":[],"options":{"priority":7}}`:        7,
	} {
		r := call(t, s, "POST", "/ojs/v1/jobs", body)
		if r.status != 201 {
			t.Fatalf("%s: %d %s", body, r.status, r.raw)
		}
		if p := r.body["job"].(map[string]any)["priority"]; p != want {
			t.Fatalf("%s: priority %v, want %v", body, p, want)
		}
	}

	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"priority":"low"}}]}`)
	if r.status != 201 {
		t.Fatalf("workflow: %d %s", r.status, r.raw)
	}

	for body, field := range map[string]string{
		`{"type":"a.b","args":[],"options":{"priority":"urgent"}}`: "options.priority",
		`{"type":"a.b","args":[],"options":{"priority":""}}`:       "options.priority",
		`{"type":"a.b","args":[],"options":{"priority":" high"}}`:  "options.priority",
		`{"type":"a.b","args":[],"options":{"priority":"10"}}`:     "options.priority",
		`{"type":"a.b","args":[],"options":{"priority":101}}`:      "options.priority",
	} {
		r := call(t, s, "POST", "/ojs/v1/jobs", body)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if !strings.Contains(string(r.raw), field) {
			t.Fatalf("%s: the error does not name %s: %s", body, field, r.raw)
		}
		if !strings.Contains(body, "101") && !strings.Contains(string(r.raw), `high`) {
			t.Fatalf("%s: the error does not list the named levels: %s", body, r.raw)
		}
	}

	// A bulk filter's named priority matches the jobs of that number.
	hi := enqueueIn(t, s, "named", `,"priority":10`)
	lo := enqueueIn(t, s, "named", `,"priority":-10`)
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"named","priority":"HIGH"}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "cancelled": 1, "skipped": 0})
	if got := bulkItems(t, r, 1)[0]["job_id"]; got != hi {
		t.Fatalf("filter priority high cancelled %v, want %s (not %s)", got, hi, lo)
	}
}

// TestDeadLetterOverrideNamedPriority: a dead-letter retry's override takes a named priority.
func TestDeadLetterOverrideNamedPriority(t *testing.T) {
	s := serverOn(t, "memory")
	id := enqueueJob(t, s, `{"type":"mail.send","args":[1],"options":{"queue":"dlp","retry":{"max_attempts":1}}}`)
	if got := fetchOneID(t, s, "dlp"); got != id {
		t.Fatalf("fetched %s, want %s", got, id)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"type":"Bad","message":"no"}}`)
	r := mustCall(t, s, 200, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"priority":"high"}}`)
	if p := r.body["job"].(map[string]any)["priority"]; p != 10.0 {
		t.Fatalf("override priority high: priority %v, want 10: %s", p, r.raw)
	}
}
