package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// TestRateLimitEpisodeEvents: ojs-rate-limiting.md 11.1 (RL-006) on every store of the flow tests. A
// key at its concurrency limit with jobs waiting gives one rate_limit.exceeded (key, strategy,
// limit, current), however many fetches find it limited while the backlog lasts, and one
// rate_limit.released (key, strategy, job_id) when a job of it starts leaving the key not limited.
func TestRateLimitEpisodeEvents(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		key := "rl-ev-" + uuidv7.New()[24:]
		queue := "rlev"
		body := fmt.Sprintf(`{"type":"rl.ev","args":[],"options":{"queue":%q,"rate_limit":{"key":%q,"concurrency":1}}}`, queue, key)
		var ids []string
		for range 3 {
			ids = append(ids, enqueueJob(t, s, body))
		}
		ack := func(j map[string]any) {
			t.Helper()
			r := call(t, s, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q}`, j["id"], j["claim_token"]))
			if r.status != http.StatusOK {
				t.Fatalf("ack: %d %s", r.status, r.raw)
			}
		}
		emptyFetch := func() {
			t.Helper()
			r := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"w"}`)
			if jobs, _ := r.body["jobs"].([]any); r.status != http.StatusOK || len(jobs) != 0 {
				t.Fatalf("fetch while the key is full: %d %s", r.status, r.raw)
			}
		}

		first := fetchFrom(t, s, queue) // takes the key's only slot, two jobs wait: exceeded
		emptyFetch()
		emptyFetch()
		ack(first)
		second := fetchFrom(t, s, queue) // one job still waits: the episode goes on
		emptyFetch()
		ack(second)
		third := fetchFrom(t, s, queue) // nothing waits any more: released, with this job
		ack(third)
		if got := []any{first["id"], second["id"], third["id"]}; fmt.Sprint(got) != fmt.Sprint([]any{ids[0], ids[1], ids[2]}) {
			t.Fatalf("fetched %v, want %v in order", got, ids)
		}

		var events []map[string]any
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := mustCall(t, s, 200, "GET", "/ojs/v1/events?type=rate_limit.*&limit=1000", nil)
			events = events[:0]
			for _, e := range r.body["events"].([]any) {
				if ev := e.(map[string]any); ev["data"].(map[string]any)["key"] == key {
					events = append(events, ev)
				}
			}
			if len(events) >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // nothing more comes
		if len(events) != 2 {
			t.Fatalf("want one rate_limit.exceeded then one rate_limit.released for %s, got %v", key, events)
		}
		ex, rel := events[0], events[1]
		if ex["type"] != "rate_limit.exceeded" || rel["type"] != "rate_limit.released" {
			t.Fatalf("want exceeded then released, got %s then %s", ex["type"], rel["type"])
		}
		for _, e := range events {
			if e["specversion"] != "1.0" || e["id"] == "" || e["source"] == "" || e["time"] == "" {
				t.Fatalf("envelope: %v", e)
			}
		}
		exd := ex["data"].(map[string]any)
		if exd["strategy"] != "concurrency" || exd["limit"] != float64(1) || exd["current"] != float64(1) {
			t.Fatalf("rate_limit.exceeded data: %v", exd)
		}
		reld := rel["data"].(map[string]any)
		if reld["strategy"] != "concurrency" || reld["job_id"] != ids[2] || rel["subject"] != ids[2] {
			t.Fatalf("rate_limit.released: %v", rel)
		}
	})
}
