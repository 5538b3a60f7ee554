package server

import (
	"strings"
	"testing"
)

// TestPatchJobPriority: PATCH /ojs/v1/jobs/{id} changes a waiting job's priority (a number or a
// name), answers the one it had, and the fetch order follows; priority.changed is logged. Any
// member but priority, a bad value, an unknown or running job, and bodies no store can hold are
// refused with the status the other endpoints give them.
func TestPatchJobPriority(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			enq := func() string { return enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"patchq"}}`) }
			a, b, c := enq(), enq(), enq()
			path := func(id string) string { return "/ojs/v1/jobs/" + id }

			r := mustCall(t, s, 200, "PATCH", path(c), `{"priority":"high"}`)
			job, _ := r.body["job"].(map[string]any)
			if r.body["id"] != c || r.body["priority"] != float64(10) || r.body["previous_priority"] != float64(0) ||
				job == nil || job["priority"] != float64(10) || job["state"] != "available" {
				t.Fatalf("PATCH answer: %s", r.raw)
			}
			r = mustCall(t, s, 200, "PATCH", path(a), `{"priority":-5}`)
			if r.body["priority"] != float64(-5) || r.body["previous_priority"] != float64(0) {
				t.Fatalf("PATCH answer: %s", r.raw)
			}
			if got := mustCall(t, s, 200, "GET", path(c), nil).body["job"].(map[string]any)["priority"]; got != float64(10) {
				t.Fatalf("GET after PATCH: priority %v", got)
			}

			for _, want := range []string{c, b, a} {
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["patchq"],"worker_id":"w1","count":1}`)
				jobs, _ := r.body["jobs"].([]any)
				if len(jobs) != 1 || jobs[0].(map[string]any)["id"] != want {
					t.Fatalf("fetch: want %s (raised first, lowered last): %s", want, r.raw)
				}
			}

			var changed map[string]any
			for _, e := range waitLogged(t, s, c, "priority.changed") {
				if e["type"] == "priority.changed" {
					changed, _ = e["data"].(map[string]any)
				}
			}
			if changed["job_id"] != c || changed["previous_priority"] != float64(0) || changed["new_priority"] != float64(10) {
				t.Fatalf("priority.changed data: %v", changed)
			}

			// c is active now: 409, as other refused transitions answer.
			r = call(t, s, "PATCH", path(c), `{"priority":1}`)
			checkErrorBody(t, r, 409, "")
			if !strings.Contains(string(r.raw), "active") {
				t.Fatalf("409 does not name the state: %s", r.raw)
			}
			d := enq()
			for _, tc := range []struct{ body, field string }{
				{`{"priority":1,"queue":"other"}`, "queue"},
				{`{"state":"cancelled"}`, "state"},
				{`{}`, "priority"},
				{``, "priority"},
				{`{"priority":null}`, "priority"},
				{`{"priority":101}`, "priority"},
				{`{"priority":-101}`, "priority"},
				{`{"priority":1.5}`, "priority"},
				{`{"priority":"urgent"}`, "priority"},
				{`{"priority":true}`, "priority"},
			} {
				r := call(t, s, "PATCH", path(d), tc.body)
				checkErrorBody(t, r, 400, "")
				if f, _ := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != tc.field {
					t.Fatalf("body %s: field %v, want %s: %s", tc.body, f, tc.field, r.raw)
				}
			}
			for _, body := range []string{`{"priority":`, `{"priority":1} x`} {
				checkErrorBody(t, call(t, s, "PATCH", path(d), body), 400, CodeInvalidPayload)
			}
			for _, body := range []string{`[1]`, `{"priority":"a\u0000b"}`, "{\"priority\":\"a\xffb\"}",
				`{"a\u0000":1}`, "{\"\xff\":1}"} {
				checkErrorBody(t, call(t, s, "PATCH", path(d), body), 400, "")
			}
			if got := mustCall(t, s, 200, "GET", path(d), nil).body["job"].(map[string]any)["priority"]; got != float64(0) {
				t.Fatalf("a refused PATCH changed the priority to %v", got)
			}

			checkErrorBody(t, call(t, s, "PATCH", path("019539a4-b68c-7def-8000-1a2b3c4d5e6f"), `{"priority":1}`), 404, "")
			checkErrorBody(t, call(t, s, "PATCH", path("not-an-id"), `{"priority":1}`), 400, "")
			r = call(t, s, "PUT", path(d), `{"priority":1}`)
			checkErrorBody(t, r, 405, "")
			if !strings.Contains(r.header.Get("Allow"), "PATCH") {
				t.Fatalf("Allow %q does not name PATCH", r.header.Get("Allow"))
			}
		})
	}
}
