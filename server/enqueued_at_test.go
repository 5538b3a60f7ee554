package server

import (
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// promotingServer is a Server over a store of the given kind whose client promotes scheduled jobs.
func promotingServer(t *testing.T, kind string) *Server {
	t.Helper()
	client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{
		PollInterval: 100 * time.Millisecond, RescueInterval: 100 * time.Millisecond, LeaderTTL: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client, Backend: kind})
	return s
}

// TestEnqueuedAtOfScheduledJobAfterFetch: ojs-core.md §5.3, enqueued_at is "the timestamp
// when the job entered the available state ... For scheduled jobs, this is set when the job
// transitions from scheduled to available." A scheduled job shows enqueued_at = its scheduled time
// while it waits, then, once fetched, enqueued_at jumps back to created_at: before the job was even
// due. Dashboards and clients computing queue wait (started_at - enqueued_at) got the whole delay
// counted as waiting in the queue. It now stays the time the job was due.
func TestEnqueuedAtOfScheduledJobAfterFetch(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := promotingServer(t, kind)
			r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"queue":"sched","scheduled_at":"+PT2S"}`)
			job := r.body["job"].(map[string]any)
			id := job["id"].(string)
			created := job["created_at"].(string)
			sched := job["scheduled_at"].(string)
			var fetched map[string]any
			deadline := time.Now().Add(30 * time.Second)
			for fetched == nil {
				if time.Now().After(deadline) {
					t.Fatal("the scheduled job never became fetchable")
				}
				r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["sched"],"worker_id":"w"}`)
				if jobs := r.body["jobs"].([]any); len(jobs) == 1 {
					fetched = jobs[0].(map[string]any)
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
			if fetched["id"] != id {
				t.Fatalf("fetched %v, want %s", fetched["id"], id)
			}
			enq, _ := fetched["enqueued_at"].(string)
			ct, _ := time.Parse(time.RFC3339Nano, created)
			st, _ := time.Parse(time.RFC3339Nano, sched)
			et, err := time.Parse(time.RFC3339Nano, enq)
			if err != nil {
				t.Fatalf("fetched job without a valid enqueued_at (%q): %v", enq, err)
			}
			if et.Before(st) {
				t.Fatalf("fetched job: enqueued_at %s is before its scheduled_at %s (created_at %s, equal: %v): "+
					"the job entered available no earlier than it was due (ojs-core §5.3)", enq, sched, created, et.Equal(ct))
			}
			g := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
			if g["enqueued_at"] != enq {
				t.Fatalf("GET after fetch: enqueued_at %v, the fetch said %s", g["enqueued_at"], enq)
			}
		})
	}
}
