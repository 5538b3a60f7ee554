package server

import (
	"fmt"
	"testing"
	"time"
)

func queuePaused(t *testing.T, s *Server, name string) bool {
	t.Helper()
	return mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/"+name, nil).body["paused"] == true
}

// TestMaintenanceMode, on every store: enabling pauses the queues that were not paused (recorded),
// fetches get nothing while inserts go on, a job falling due stays scheduled; disabling resumes
// exactly the queues it paused.
func TestMaintenanceMode(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			const path = "/ojs/v1/admin/system/maintenance"
			if r := mustCall(t, s, 200, "GET", path, nil); r.body["maintenance"] != false {
				t.Fatalf("before: %s", r.raw)
			}
			enqueueJob(t, s, `{"type":"m.run","args":[],"options":{"queue":"m-open"}}`)
			enqueueJob(t, s, `{"type":"m.run","args":[],"options":{"queue":"m-held"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/queues/m-held/pause", nil)

			checkErrorBody(t, call(t, s, "POST", path, `{}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", path, `{"enabled":true,"estimated_duration":"soon"}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "PUT", path, `{"enabled":true}`), 405, CodeMethodNotAllowed)

			on := mustCall(t, s, 200, "POST", path, `{"enabled":true,"reason":"database migration","estimated_duration":"PT30M"}`)
			if on.body["maintenance"] != true || on.body["reason"] != "database migration" || on.body["enabled_at"] == nil ||
				on.body["estimated_end"] == nil {
				t.Fatalf("enable: %s", on.raw)
			}
			if qs := on.body["paused_queues"].([]any); len(qs) != 1 || qs[0] != "m-open" {
				t.Fatalf("maintenance paused %v, want [m-open] (m-held was paused before)", qs)
			}
			if !queuePaused(t, s, "m-open") {
				t.Fatal("m-open is not paused")
			}
			// Fetches get nothing, even from a queue that appears during maintenance.
			enqueueJob(t, s, `{"type":"m.run","args":[],"options":{"queue":"m-new"}}`)
			for _, q := range []string{"m-open", "m-new"} {
				if jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w1"}).body["jobs"].([]any); len(jobs) != 0 {
					t.Fatalf("fetched %v from %s in maintenance", jobs, q)
				}
			}
			// A job that falls due in maintenance mode stays scheduled, even when read (repair).
			dueAt := time.Now().Add(100 * time.Millisecond)
			due := enqueueJob(t, s, fmt.Sprintf(`{"type":"m.run","args":[],"options":{"queue":"m-open","scheduled_at":%q}}`,
				dueAt.UTC().Format(time.RFC3339Nano)))
			for time.Now().Before(dueAt) {
				time.Sleep(10 * time.Millisecond)
			}
			if st := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+due, nil).body["job"].(map[string]any)["state"]; st != "scheduled" {
				t.Fatalf("a due job read in maintenance mode is %v, want scheduled", st)
			}
			if r := mustCall(t, s, 200, "GET", path, nil); r.body["maintenance"] != true || r.body["reason"] != "database migration" {
				t.Fatalf("status: %s", r.raw)
			}
			// Enabling again takes the queues that appeared since.
			again := mustCall(t, s, 200, "POST", path, `{"enabled":true,"reason":"still migrating"}`)
			if qs := again.body["paused_queues"].([]any); len(qs) != 2 || again.body["estimated_end"] != nil || again.body["reason"] != "still migrating" {
				t.Fatalf("enable again: %s", again.raw)
			}

			off := mustCall(t, s, 200, "POST", path, `{"enabled":false}`)
			if off.body["maintenance"] != false || len(off.body["resumed_queues"].([]any)) != 2 {
				t.Fatalf("disable: %s", off.raw)
			}
			if queuePaused(t, s, "m-open") || queuePaused(t, s, "m-new") || !queuePaused(t, s, "m-held") {
				t.Fatal("disabling must resume m-open and m-new and leave m-held paused")
			}
			if st := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+due, nil).body["job"].(map[string]any)["state"]; st != "available" {
				t.Fatalf("the due job after maintenance is %v, want available", st)
			}
			if jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"m-open"}, "worker_id": "w1", "count": 10}).body["jobs"].([]any); len(jobs) != 2 {
				t.Fatalf("after maintenance m-open gave %v, want its two jobs", jobs)
			}
			if r := mustCall(t, s, 200, "POST", path, `{"enabled":false}`); r.body["maintenance"] != false {
				t.Fatalf("disabling twice: %s", r.raw)
			}
		})
	}
}
