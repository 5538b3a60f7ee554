package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Handler benchmarks over the memory store, without the network: the cost the API adds per request.
// The throughput comparisons with other systems are the benchmark program's (bench/), over HTTP.

var benchJob = []byte(`{"type":"email.send","args":["user@example.com",{"locale":"en"}],"meta":{"trace_id":"abc"},"options":{"queue":"bench"}}`)

func benchRequest(b *testing.B, h http.Handler, method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	return rec
}

func BenchmarkEnqueue(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchRequest(b, s, "POST", "/ojs/v1/jobs", benchJob)
		}
	})
}

func BenchmarkRoundTrip(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	fetch := []byte(`{"queues":["bench"],"worker_id":"w"}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchRequest(b, s, "POST", "/ojs/v1/jobs", benchJob)
			rec := benchRequest(b, s, "POST", "/ojs/v1/workers/fetch", fetch)
			var out struct {
				Jobs []struct {
					ID string `json:"id"`
				} `json:"jobs"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Jobs) == 0 {
				continue // another goroutine took it
			}
			benchRequest(b, s, "POST", "/ojs/v1/workers/ack", []byte(`{"job_id":"`+out.Jobs[0].ID+`","result":{"ok":true}}`))
		}
	})
}
