package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestProgressStreamMultilineData, on every store: progress data sent pretty-printed (line breaks
// between its tokens) reaches the progress stream as one SSE data line of JSON. Written as sent, the
// line breaks ended the data line and an EventSource read half an object (PostgreSQL's jsonb alone
// compacted it).
func TestProgressStreamMultilineData(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s, _ := storeServer(t, kind, Config{})
			srv := httptest.NewServer(s)
			defer srv.Close()
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"sse-framing"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"sse-framing"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress",
				"{\"progress\": 0.5,\n \"data\": {\n  \"rows\": 14000,\n  \"step\": \"load\"\n},\r\n \"checkpoint\": {\n \"offset\": 7\n}}")
			resp, err := http.Get(srv.URL + "/ojs/v1/jobs/" + id + "/progress/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			ev := nextEvent(t, readEvents(t, resp)) // readEvents fails the test on a data line that is not JSON
			data, _ := ev.data["data"].(map[string]any)
			if ev.data["progress"] != 0.5 || data["step"] != "load" || data["rows"] != float64(14000) {
				t.Fatalf("%q event %v, want progress 0.5 and the reported data", ev.name, ev.data)
			}
		})
	}
}
