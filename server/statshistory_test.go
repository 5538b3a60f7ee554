package server

import (
	"net/http"
	"testing"
	"time"
)

// historyTotals sums the points of a history answer.
func historyTotals(t *testing.T, r *response) (processed, failed, enqueued float64, withLatency int) {
	t.Helper()
	for _, p := range r.body["data"].([]any) {
		m := p.(map[string]any)
		processed += m["processed"].(float64)
		failed += m["failed"].(float64)
		enqueued += m["enqueued"].(float64)
		if m["latency_p50_ms"] != nil && m["latency_p99_ms"] != nil {
			withLatency++
		}
	}
	return
}

// TestAdminStatsHistory, on every store: GET /ojs/v1/admin/stats/history counts the jobs enqueued
// through the server and the attempts its workers ended, per period and queue, and /admin/stats and
// /admin/queues show the throughput.
func TestAdminStatsHistory(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			for i := 0; i < 3; i++ {
				enqueueJob(t, s, `{"type":"h.run","args":[],"options":{"queue":"hist","retry":{"max_attempts":1}}}`)
			}
			enqueueJob(t, s, `{"type":"h.run","args":[],"options":{"queue":"other"}}`)
			ok := fetchOneID(t, s, "hist")
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+ok+`","worker_id":"w1"}`)
			bad := fetchOneID(t, s, "hist")
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+bad+`","worker_id":"w1","error":{"message":"boom"}}`)

			var r *response
			deadline := time.Now().Add(15 * time.Second)
			for {
				r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats/history?period=1m&queue=hist", nil)
				if p, f, _, _ := historyTotals(t, r); p == 1 && f == 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			p, f, e, lat := historyTotals(t, r)
			if p != 1 || f != 1 || e != 3 || lat == 0 || r.body["period"] != "1m" || r.body["queue"] != "hist" {
				t.Fatalf("history of hist: processed %v failed %v enqueued %v (latency in %d points): %s", p, f, e, lat, r.raw)
			}
			if n := len(r.body["data"].([]any)); n < 60 || n > 62 {
				t.Fatalf("the last hour by minute has %d points", n)
			}
			all := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats/history?period=1h", nil)
			if p, f, e, _ := historyTotals(t, all); p != 1 || f != 1 || e != 4 {
				t.Fatalf("hourly history of all queues: %s", all.raw)
			}
			since := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339)
			other := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats/history?period=5m&queue=other&since="+since, nil)
			if p, f, e, _ := historyTotals(t, other); p != 0 || f != 0 || e != 1 {
				t.Fatalf("history of other: %s", other.raw)
			}
			stats := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats", nil)
			if tp := stats.body["throughput"].(map[string]any); tp["processed_per_minute"] != 0.2 || tp["failed_per_minute"] != 0.2 {
				t.Fatalf("stats throughput (1 each over 5 minutes): %s", stats.raw)
			}
			q := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/hist", nil)
			if tp := q.body["throughput"].(map[string]any); tp["processed_per_minute"] != 0.2 {
				t.Fatalf("queue throughput: %s", q.raw)
			}
			if lat := q.body["latency_ms"].(map[string]any); lat["p50"] == nil || lat["p99"] == nil {
				t.Fatalf("queue latency: %s", q.raw)
			}
			if lat := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/other", nil).body["latency_ms"].(map[string]any); lat["p50"] != nil {
				t.Fatalf("a queue without attempts has no latency: %v", lat)
			}
			for _, it := range mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues", nil).body["items"].([]any) {
				if m := it.(map[string]any); m["throughput"] == nil || m["latency_ms"] == nil {
					t.Fatalf("queue list item without throughput or latency: %v", m)
				}
			}

			for _, bad := range []string{"period=2m", "since=yesterday", "until=2001-01-01T00:00:00Z", "queue=Bad_Queue"} {
				checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/stats/history?"+bad, nil), 400, CodeInvalidRequest)
			}
			old := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats/history?period=1m&since=2001-01-01T00:00:00Z", nil)
			if n := len(old.body["data"].([]any)); n > 1441 || n < 1440 {
				t.Fatalf("a since beyond the minute retention is clamped to 24 h: %d points", n)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/stats/history", nil), http.StatusMethodNotAllowed, CodeMethodNotAllowed)
		})
	}
}

// TestAdminStatsHistoryRangeOutsideRetention: a since/until range wholly in the future, or wholly
// older than the retention, answers 200 with no points (it used to panic: a negative capacity).
func TestAdminStatsHistoryRangeOutsideRetention(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for _, q := range []string{
		"period=5m&since=3000-01-01T00:00:00Z&until=3000-01-02T00:00:00Z",
		"period=1m&since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z",
		"period=1h&since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z",
	} {
		r := mustCall(t, s, http.StatusOK, "GET", "/ojs/v1/admin/stats/history?"+q, nil)
		if data, ok := r.body["data"].([]any); !ok || len(data) != 0 {
			t.Errorf("GET /admin/stats/history?%s: want empty data: %s", q, r.raw)
		}
	}
}
