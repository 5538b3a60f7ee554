package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	id   string
	name string
	data map[string]any
}

// readEvents parses server-sent events from the stream into a channel, closed at the end of the
// stream.
func readEvents(t *testing.T, resp *http.Response) <-chan sseEvent {
	out := make(chan sseEvent, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
					t.Errorf("event data %q: %v", line, err)
				}
			case line == "" && ev.name != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	return out
}

func nextEvent(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	return receive(t, events, "event")
}

// receive returns the next value of ch, failing the test when ch is closed or nothing comes within
// 20 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("no more %s: the channel was closed", what)
		}
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s within 20 s", what)
	}
	var zero T
	return zero
}

// TestProgressStreamAndCheckpoint, on every store: GET /ojs/v1/jobs/{id}/progress/stream sends the
// progress an OJS worker reports, follows the job across a retry, and ends with "completed"; a
// checkpoint saved with a report reaches the retry's fetch as last_checkpoint.
func TestProgressStreamAndCheckpoint(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			srv := httptest.NewServer(s)
			defer srv.Close()
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"sse",
				"retry":{"max_attempts":2,"initial_interval_ms":1,"jitter":false}}}`)
			path := "/ojs/v1/jobs/" + id + "/progress"

			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000/progress/stream", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "POST", path+"/stream", nil), 405, CodeMethodNotAllowed)

			resp, err := http.Get(srv.URL + path + "/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream answered %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readEvents(t, resp)

			fetched := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"sse"}, "worker_id": "w1"})
			if job := fetched.body["jobs"].([]any)[0].(map[string]any); job["last_checkpoint"] != nil {
				t.Fatalf("a first attempt came with a checkpoint: %v", job)
			}
			mustCall(t, s, 204, "PUT", path, `{"progress":0.3,"data":{"rows":30},"checkpoint":{"offset":30}}`)
			ev := nextEvent(t, events)
			if ev.name != "progress" || ev.data["progress"] != 0.3 || ev.data["data"].(map[string]any)["rows"] != 30.0 ||
				ev.data["attempt"] != 1.0 || ev.data["updated_at"] == nil {
				t.Fatalf("first event: %+v", ev)
			}
			checkErrorBody(t, call(t, s, "PUT", path, `{"checkpoint":[1]}`), 400, CodeInvalidRequest)
			if r := mustCall(t, s, 200, "GET", path, nil); r.body["last_checkpoint"].(map[string]any)["offset"] != 30.0 {
				t.Fatalf("GET progress lacks the checkpoint: %s", r.raw)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"message":"boom"}}`)

			var retry map[string]any
			deadline := time.Now().Add(15 * time.Second)
			for retry == nil && time.Now().Before(deadline) {
				jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"sse"}, "worker_id": "w2"}).body["jobs"].([]any)
				if len(jobs) > 0 {
					retry = jobs[0].(map[string]any)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if retry == nil || retry["attempt"] != 2.0 || retry["last_checkpoint"].(map[string]any)["offset"] != 30.0 {
				t.Fatalf("the retry's fetch: %v", retry)
			}
			mustCall(t, s, 204, "PUT", path, `{"progress":0.1}`)
			ev = nextEvent(t, events)
			if ev.name != "progress" || ev.data["progress"] != 0.1 || ev.data["attempt"] != 2.0 || ev.data["data"] != nil {
				t.Fatalf("the retry's progress event: %+v", ev)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w2"}`)
			ev = nextEvent(t, events)
			if ev.name != "completed" || ev.data["progress"] != 1.0 || ev.data["state"] != "completed" {
				t.Fatalf("the last event: %+v", ev)
			}
			select {
			case ev, ok := <-events:
				if ok {
					t.Fatalf("an event after completion: %+v", ev)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the stream stayed open after completion")
			}
			job := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
			if job["last_checkpoint"].(map[string]any)["offset"] != 30.0 {
				t.Fatalf("the job view lacks last_checkpoint: %v", job)
			}

			// A job that already ended: the stream answers its end at once.
			resp2, err := http.Get(srv.URL + path + "/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp2.Body.Close()
			if ev := nextEvent(t, readEvents(t, resp2)); ev.name != "completed" {
				t.Fatalf("stream of an ended job: %+v", ev)
			}
		})
	}
}

// TestProgressStreamRemoveCompleted: with Config.RemoveCompleted (pronto serve --remove-completed)
// a watched job that completes is gone as soon as it completes, yet its stream ends with
// "completed" (progress 1, the last data reported), not with the "error" of a deleted job; a job
// deleted while watched still ends its stream with that error.
func TestProgressStreamRemoveCompleted(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := openStore(t, kind)
			client, err := pronto.NewClient(st, &pronto.Config{RemoveCompleted: true})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			srv := httptest.NewServer(s)
			defer srv.Close()
			stream := func(id string) <-chan sseEvent {
				resp, err := http.Get(srv.URL + "/ojs/v1/jobs/" + id + "/progress/stream")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				return readEvents(t, resp)
			}

			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"sse-rm"}}`)
			events := stream(id)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"sse-rm"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress", `{"progress":0.5,"data":{"rows":5}}`)
			if ev := nextEvent(t, events); ev.name != "progress" {
				t.Fatalf("first event %+v, want progress", ev)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w1"}`)
			ev := nextEvent(t, events)
			if ev.name != "completed" || ev.data["progress"] != 1.0 || ev.data["state"] != "completed" ||
				ev.data["data"].(map[string]any)["rows"] != 5.0 {
				t.Fatalf("the job completed (and was removed), but its stream ended with %q %v, want completed", ev.name, ev.data)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/"+id, nil), 404, CodeNotFound)

			gone := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"sse-rm-deleted"}}`)
			events = stream(gone) // the stream has read the job once its headers came
			if _, err := st.DeleteJob(context.Background(), gone); err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(t, events); ev.name != "error" || ev.data["code"] != "not_found" {
				t.Fatalf("the job was deleted, but its stream ended with %q %v, want error not_found", ev.name, ev.data)
			}
		})
	}
}

// TestProgressStalledRemote, on every store: an OJS worker that reported progress over HTTP and
// then went silent yields one progress.stalled event (with last_progress and last_update) in GET
// /ojs/v1/events; after its ack nothing more.
func TestProgressStalledRemote(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{ProgressStallTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"stall"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"stall"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress", `{"progress":0.4}`)
			var stalled []any
			deadline := time.Now().Add(15 * time.Second)
			for len(stalled) == 0 && time.Now().Before(deadline) {
				stalled = mustCall(t, s, 200, "GET", "/ojs/v1/events?types=progress.stalled", nil).body["events"].([]any)
				if len(stalled) == 0 {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if len(stalled) != 1 {
				t.Fatalf("stall events: %v", stalled)
			}
			data := stalled[0].(map[string]any)["data"].(map[string]any)
			if data["job_id"] != id || data["last_progress"] != 0.4 || data["last_update"] == nil {
				t.Fatalf("stall event data: %v", data)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w1"}`)
		})
	}
}

// fetchOneID fetches one job of queue as worker w1 and returns its id.
func fetchOneID(t *testing.T, s *Server, queue string) string {
	t.Helper()
	jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{queue}, "worker_id": "w1"}).body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("fetch %s: %v", queue, jobs)
	}
	return jobs[0].(map[string]any)["id"].(string)
}

// TestWorkflowProgress, on every store: GET /ojs/v1/workflows/{id}/progress aggregates a chain's
// steps (completed 1, the active step's progress, 0 for the rest; callbacks left out) and a batch's
// completed share.
func TestWorkflowProgress(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			r := mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"etl","options":{"queue":"wfp"},
				"steps":[{"type":"etl.extract","args":[]},{"type":"etl.transform","args":[]},{"type":"etl.load","args":[]}],
				"callbacks":{"on_success":{"type":"etl.done","args":[],"options":{"queue":"wfp-cb"}}}}`)
			id := r.body["workflow"].(map[string]any)["id"].(string)
			path := "/ojs/v1/workflows/" + id + "/progress"
			if p := mustCall(t, s, 200, "GET", path, nil); p.body["progress"] != 0.0 || len(p.body["steps"].([]any)) != 3 {
				t.Fatalf("before any work: %s", p.raw)
			}
			first := fetchOneID(t, s, "wfp")
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+first+`","worker_id":"w1"}`)
			var second string
			deadline := time.Now().Add(15 * time.Second)
			for second == "" && time.Now().Before(deadline) {
				jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"wfp"}, "worker_id": "w1"}).body["jobs"].([]any)
				if len(jobs) == 1 {
					second = jobs[0].(map[string]any)["id"].(string)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if second == "" {
				t.Fatal("the chain's second step was never released")
			}
			mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+second+"/progress", `{"progress":0.75,"data":{"records":75}}`)
			p := mustCall(t, s, 200, "GET", path, nil)
			if v := p.body["progress"].(float64); v < 0.583 || v > 0.584 || p.body["type"] != "chain" || p.body["workflow_id"] != id ||
				p.header.Get("X-OJS-Progress") == "" {
				t.Fatalf("chain progress (1 + 0.75 + 0) / 3: %s", p.raw)
			}
			steps := p.body["steps"].([]any)
			s0, s1, s2 := steps[0].(map[string]any), steps[1].(map[string]any), steps[2].(map[string]any)
			if s0["state"] != "completed" || s0["progress"] != 1.0 || s0["job_id"] != first ||
				s1["state"] != "active" || s1["progress"] != 0.75 || s1["data"].(map[string]any)["records"] != 75.0 || s1["type"] != "etl.transform" ||
				s2["progress"] != nil || s2["state"] != "pending" {
				t.Fatalf("steps: %s", p.raw)
			}

			r = mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{"type":"batch","jobs":[
				{"type":"b.a","args":[],"options":{"queue":"wfb"}},{"type":"b.b","args":[],"options":{"queue":"wfb"}}]}`)
			batch := r.body["workflow"].(map[string]any)["id"].(string)
			done := fetchOneID(t, s, "wfb")
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+done+`","worker_id":"w1"}`)
			if p := mustCall(t, s, 200, "GET", "/ojs/v1/workflows/"+batch+"/progress", nil); p.body["progress"] != 0.5 {
				t.Fatalf("batch progress 1 of 2: %s", p.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000/progress", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/workflows/nope/progress", nil), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "PUT", path, nil), 405, CodeMethodNotAllowed)
		})
	}
}

// TestProgressStreamEndsOnDrain: Drain ends an open progress stream (a graceful shutdown need not
// wait for the job) and refuses new ones with 503.
func TestProgressStreamEndsOnDrain(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"drain"}}`)
	resp, err := http.Get(srv.URL + "/ojs/v1/jobs/" + id + "/progress/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	requireStreamEndsOnDrain(t, s, readEvents(t, resp), "/ojs/v1/jobs/"+id+"/progress/stream")
}

// requireStreamEndsOnDrain drains s and checks that the open stream of events ends without a
// further event and that a new stream at path is refused 503 with Retry-After.
func requireStreamEndsOnDrain(t *testing.T, s *Server, events <-chan sseEvent, path string) {
	t.Helper()
	s.Drain()
	select {
	case ev, ok := <-events:
		if ok {
			t.Fatalf("an event on drain: %+v", ev)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the stream stayed open after Drain")
	}
	r := call(t, s, "GET", path, nil)
	checkErrorBody(t, r, 503, "unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}
