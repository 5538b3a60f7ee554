package server

import (
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestProgressCompletedEvent: on every store, an OJS worker's ack of a job it reported progress on
// records progress.completed (progress 1, the attempt's duration, the last data) after job.completed;
// the ack of a job with no progress records none.
func TestProgressCompletedEvent(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			withProgress := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"pc"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"pc"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+withProgress+"/progress", `{"progress":0.4,"data":{"rows":7}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+withProgress+`","worker_id":"w1"}`)
			without := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"pc"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"pc"}, "worker_id": "w1"})
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+without+`","worker_id":"w1"}`)
			// A third job with progress, acked last: the checks run in ack order, so once its event is
			// logged, the check of the job without progress has been made too.
			last := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"pc"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"pc"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+last+"/progress", `{"progress":0.9}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+last+`","worker_id":"w1"}`)

			deadline := time.Now().Add(20 * time.Second)
			var r *response
			for {
				// Every ack's job.completed is logged, and the last job's progress.completed.
				done := mustCall(t, s, 200, "GET", "/ojs/v1/events?type=job.completed", nil)
				r = mustCall(t, s, 200, "GET", "/ojs/v1/events?type=progress.completed", nil)
				if strings.Contains(string(done.raw), without) && strings.Contains(string(done.raw), withProgress) &&
					strings.Contains(string(r.raw), last) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("events missing: %s\n%s", done.raw, r.raw)
				}
				time.Sleep(10 * time.Millisecond)
			}
			evs, _ := r.body["events"].([]any)
			if len(evs) != 2 || strings.Contains(string(r.raw), without) {
				t.Fatalf("want progress.completed for the two jobs with progress only, got %s", r.raw)
			}
			ev := evs[0].(map[string]any)
			if ev["data"].(map[string]any)["job_id"] != withProgress {
				ev = evs[1].(map[string]any)
			}
			data, _ := ev["data"].(map[string]any)
			if data["job_id"] != withProgress || data["progress"] != 1.0 {
				t.Fatalf("progress.completed event: %s", r.raw)
			}
			if _, ok := data["duration_ms"].(float64); !ok {
				t.Fatalf("progress.completed has no duration_ms: %s", r.raw)
			}
			if d, _ := data["data"].(map[string]any); d["rows"] != 7.0 {
				t.Fatalf("progress.completed lacks the last data: %s", r.raw)
			}
		})
	}
}

// TestDeadLetterPrunedEvent: the client's EventDeadLetterPruned appears in the events API as
// dead_letter.pruned with the queue and the count (ojs-dead-letter.md 8.1).
func TestDeadLetterPrunedEvent(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	s.clientEvent(&pronto.Event{Kind: pronto.EventDeadLetterPruned, Job: &pronto.JobRow{Queue: "billing"}, Count: 7, At: time.Now()})
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=dead_letter.pruned&queue=billing", nil)
	evs, _ := r.body["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("want one dead_letter.pruned event: %s", r.raw)
	}
	data := evs[0].(map[string]any)["data"].(map[string]any)
	if data["queue"] != "billing" || data["count"] != 7.0 || data["archived"] != nil {
		t.Fatalf("dead_letter.pruned: %s", r.raw)
	}
	s.clientEvent(&pronto.Event{Kind: pronto.EventDeadLetterPruned, Job: &pronto.JobRow{Queue: "audit"}, Count: 2, Archived: true, At: time.Now()})
	r = mustCall(t, s, 200, "GET", "/ojs/v1/events?types=dead_letter.pruned&queue=audit", nil)
	evs, _ = r.body["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("want one dead_letter.pruned event: %s", r.raw)
	}
	if data := evs[0].(map[string]any)["data"].(map[string]any); data["count"] != 2.0 || data["archived"] != true {
		t.Fatalf("dead_letter.pruned of archived jobs: %s", r.raw)
	}
}
