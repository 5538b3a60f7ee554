package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// The handler benchmarks below run one request at a time, with the request bytes the HTTP bench
// (bench/http.go) sends, through a reused request and response writer, so that ns/op and allocs/op
// are the server's own cost per request plus the client's and memory store's (not net/http's, nor
// httptest's).

// benchOp is one reusable request to the handler.
type benchOp struct {
	h    http.Handler
	req  *http.Request
	body benchBody
	w    benchWriter
}

// benchBody is a request body read from a byte slice, reusable across requests.
type benchBody struct{ bytes.Reader }

func (*benchBody) Close() error { return nil }

// benchWriter is an http.ResponseWriter that keeps the last body.
type benchWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func newBenchOp(h http.Handler, path string) *benchOp {
	op := &benchOp{h: h, w: benchWriter{h: http.Header{}}}
	op.req = httptest.NewRequest("POST", path, nil)
	op.req.Header.Set("Content-Type", "application/json")
	return op
}

// do posts body and returns the response body (valid until the next call).
func (op *benchOp) do(b *testing.B, body []byte) []byte {
	op.body.Reset(body)
	r := *op.req
	r.Body = &op.body
	r.ContentLength = int64(len(body))
	clear(op.w.h)
	op.w.status, op.w.body = 0, op.w.body[:0]
	op.h.ServeHTTP(&op.w, &r)
	if op.w.status >= 300 {
		b.Fatalf("%s: %d %s", op.req.URL.Path, op.w.status, op.w.body)
	}
	return op.w.body
}

// reportCPU starts counting the process's CPU time; the function it returns reports it per
// operation as cpu-ns/op (wall time includes the waits of the client's batching goroutines).
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

// httpBenchJob is the job the HTTP bench enqueues (bench/http.go's httpJob).
func httpBenchJob(queue string, seq int) []byte {
	return []byte(`{"type":"bench.http","args":[` + strconv.Itoa(seq) + `],"options":{"queue":"` + queue + `"}}`)
}

// fillQueue enqueues n jobs into queue in batches of 500, as the HTTP bench's backlog.
func fillQueue(b *testing.B, h http.Handler, queue string, n int) {
	op := newBenchOp(h, "/ojs/v1/jobs/batch")
	for n > 0 {
		k := min(n, 500)
		body := []byte(`{"jobs":[`)
		for i := range k {
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, httpBenchJob(queue, i)...)
		}
		body = append(body, `]}`...)
		op.do(b, body)
		n -= k
	}
}

// BenchmarkHandlerEnqueue is POST /ojs/v1/jobs of one job.
func BenchmarkHandlerEnqueue(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	op := newBenchOp(s, "/ojs/v1/jobs")
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = httpBenchJob("bench", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		op.do(b, bodies[i%len(bodies)])
	}
}

// BenchmarkHandlerFetch is POST /ojs/v1/workers/fetch of one job from a backlog.
func BenchmarkHandlerFetch(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	fillQueue(b, s, "bench", b.N+10)
	op := newBenchOp(s, "/ojs/v1/workers/fetch")
	body := []byte(`{"queues":["bench"],"worker_id":"w1"}`)
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for range b.N {
		if !bytes.Contains(op.do(b, body), []byte(`"claim_token"`)) {
			b.Fatal("the fetch found no job")
		}
	}
}

// BenchmarkHandlerAck is POST /ojs/v1/workers/ack of a fetched job, with its claim token and a
// result, as the HTTP bench sends it.
func BenchmarkHandlerAck(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	fillQueue(b, s, "bench", b.N)
	fetch := newBenchOp(s, "/ojs/v1/workers/fetch")
	acks := make([][]byte, b.N)
	for i := range acks {
		var out struct {
			Jobs []struct {
				ID         string `json:"id"`
				ClaimToken string `json:"claim_token"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal(fetch.do(b, []byte(`{"queues":["bench"],"worker_id":"w1"}`)), &out); err != nil || len(out.Jobs) != 1 {
			b.Fatalf("fetch %d: %v %d jobs", i, err, len(out.Jobs))
		}
		acks[i], _ = json.Marshal(map[string]any{"job_id": out.Jobs[0].ID, "claim_token": out.Jobs[0].ClaimToken, "result": map[string]bool{"ok": true}})
	}
	op := newBenchOp(s, "/ojs/v1/workers/ack")
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for i := range b.N {
		op.do(b, acks[i])
	}
}
