package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// openEventStream opens GET /ojs/v1/events/stream with query and, when not "", a Last-Event-ID
// header, and returns its events; the stream is closed when the test ends.
func openEventStream(t *testing.T, url, query, lastID string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/ojs/v1/events/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("event stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return readEvents(t, resp)
}

// requireEvent takes the next event of the stream and checks its type, that its id is the
// envelope's, and, when not "", the job it is about.
func requireEvent(t *testing.T, events <-chan sseEvent, typ, jobID string) sseEvent {
	t.Helper()
	ev := nextEvent(t, events)
	if ev.name != typ || ev.data["type"] != typ || ev.id == "" || ev.data["id"] != ev.id {
		t.Fatalf("want a %s event with its id, got %+v", typ, ev)
	}
	if jobID != "" && ev.data["subject"] != jobID {
		t.Fatalf("want a %s event of job %s, got %+v", typ, jobID, ev)
	}
	return ev
}

// TestEventStream: GET /ojs/v1/events/stream pushes the events recorded after it opened, filtered
// as the polling endpoint filters, in order; Last-Event-ID (or after) resumes after an event,
// replaying what followed it; an id of no event of this server is a 400.
func TestEventStream(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' bodies close (cleanups run last first): Close waits for open requests
	before := enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"es"}}`)

	events := openEventStream(t, srv.URL, "?types=job.enqueued,job.completed&queues=es", "")
	a := enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"es"}}`)
	enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"other"}}`)
	b := enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"es"}}`)
	first := requireEvent(t, events, "job.enqueued", a) // not the job enqueued before the stream opened
	requireEvent(t, events, "job.enqueued", b)
	for _, id := range []string{before, a} {
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["es"],"worker_id":"w1"}`)
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w1"}`)
	}
	requireEvent(t, events, "job.completed", before)
	last := requireEvent(t, events, "job.completed", a)

	// A reconnect resumes after the last event it saw: the events since then, then live ones.
	resumed := openEventStream(t, srv.URL, "?types=job.enqueued,job.completed&queues=es", first.id)
	requireEvent(t, resumed, "job.enqueued", b)
	requireEvent(t, resumed, "job.completed", before)
	requireEvent(t, resumed, "job.completed", a)
	c := enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"es"}}`)
	requireEvent(t, resumed, "job.enqueued", c)
	requireEvent(t, events, "job.enqueued", c)
	// after= does the same as the header.
	requireEvent(t, openEventStream(t, srv.URL, "?queues=es&types=job.*&after="+last.id, ""), "job.enqueued", c)

	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/events/stream?after=evt_019539a4-b68c-7def-8000-ffeeddccbb00", nil), 400, CodeInvalidRequest)
	r := call(t, s, "GET", "/ojs/v1/events/stream", nil, "Last-Event-ID", "nope")
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/events/stream", nil), 405, "")
}

// TestEventStreamGap: a stream resuming after events the log no longer holds starts with a "gap"
// event counting them, then goes on with the oldest events held.
func TestEventStreamGap(t *testing.T) {
	s, _ := newTestServer(t, Config{EventBuffer: 4})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' bodies close (cleanups run last first): Close waits for open requests
	events := openEventStream(t, srv.URL, "", "")
	enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"gap"}}`)
	first := nextEvent(t, events)
	var ids []string
	for range 6 {
		ids = append(ids, enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"gap"}}`))
	}
	// The log holds the last 4 of the 7 events: 2 after first are gone.
	resumed := openEventStream(t, srv.URL, "", first.id)
	gap := nextEvent(t, resumed)
	if gap.name != "gap" || gap.data["missed"] != 2.0 {
		t.Fatalf("want a gap of 2, got %+v", gap)
	}
	for _, id := range ids[2:] {
		requireEvent(t, resumed, "job.enqueued", id)
	}
}

// TestEventStreamEndsOnDrain: Drain ends an open event stream and refuses new ones with 503.
func TestEventStreamEndsOnDrain(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close) // after the streams' bodies close (cleanups run last first): Close waits for open requests
	requireStreamEndsOnDrain(t, s, openEventStream(t, srv.URL, "", ""), "/ojs/v1/events/stream")
}

// TestEventStreamOutlivesRequestTimeout: the request timeout bounds requests, not the streams: one
// open for longer still receives events.
func TestEventStreamOutlivesRequestTimeout(t *testing.T) {
	s, _ := newTestServer(t, Config{RequestTimeout: 20 * time.Millisecond})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	events := openEventStream(t, srv.URL, "?types=job.enqueued", "")
	time.Sleep(100 * time.Millisecond) // five timeouts
	id := enqueueJob(t, s, `{"type":"es.job","args":[],"options":{"queue":"late"}}`)
	requireEvent(t, events, "job.enqueued", id)
}
