package server

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Event streams (ojs-events.md 6: HTTP streaming, beside the polling of 6.4): GET
// /ojs/v1/events/stream pushes this server's events as server-sent events as they are recorded.

// MaxEventStreams bounds the event streams one server keeps open at once; one more answers 503
// with Retry-After.
const MaxEventStreams = 1000

// eventStreamBatch is how many events a stream reads from the log per write: a stream far behind
// catches up in writes of this many.
const eventStreamBatch = 500

// eventStreamsOpen counts the open event streams of a server.
type eventStreamsOpen struct{ n atomic.Int64 }

// enter takes a place for one more stream, or reports false when MaxEventStreams are open.
func (o *eventStreamsOpen) enter() bool {
	if o.n.Add(1) > MaxEventStreams {
		o.n.Add(-1)
		return false
	}
	return true
}

func (o *eventStreamsOpen) leave() { o.n.Add(-1) }

// GET /ojs/v1/events/stream: the events of GET /ojs/v1/events, pushed as server-sent events, each
// "id: <event id>", "event: <type>" and "data: <the event's envelope>" on one line. The filters are
// the polling endpoint's (types, queues, job_types). The stream starts after the event named by the
// after parameter or the Last-Event-ID header (which a browser's EventSource sends when it
// reconnects), replaying the log from there; without either it starts with the next event. When
// the log dropped events the stream had not read (it fell behind by more than the log holds, or
// resumed from too old an id), a "gap" event says how many: {"missed": n} (events of any type). A
// comment line every ProgressStreamKeepAlive keeps idle connections open through proxies. Drain
// ends the streams and refuses new ones.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("after") == "" {
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			q := r.URL.Query()
			q.Set("after", id)
			r.URL.RawQuery = q.Encode()
		}
	}
	f, cursor, e := s.eventQuery(r)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if cursor == "" {
		f.after = s.events.latest()
	}
	f.limit = eventStreamBatch
	if s.draining.Load() {
		s.writeError(w, r, streamsDraining())
		return
	}
	if !s.eventStreams.enter() {
		s.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", retryable: true,
			headers: map[string]string{"Retry-After": "5"},
			message: "too many event streams are open on this server (" + strconv.Itoa(MaxEventStreams) + "); poll GET /ojs/v1/events instead"})
		return
	}
	defer s.eventStreams.leave()

	send := startSSE(w)
	if !send([]byte(": events of " + s.source + "\n\n")) {
		return
	}
	ctx := r.Context()
	done := s.streams.doneCh() // closed by Drain and Close, as for the progress streams
	keepAlive := time.NewTimer(ProgressStreamKeepAlive)
	defer keepAlive.Stop()
	var buf []byte
	for {
		evs, more, through, missed, next := s.events.follow(f)
		buf = buf[:0]
		if missed > 0 {
			buf = append(buf, "event: gap\ndata: {"...)
			buf = appendIntField(buf, "missed", int64(missed))
			buf = append(buf, "}\n\n"...)
		}
		for i := range evs {
			buf = append(buf, "id: "...)
			buf = append(buf, s.events.eventID(&evs[i])...)
			buf = append(buf, "\nevent: "...)
			buf = append(buf, evs[i].typ...)
			buf = append(buf, "\ndata: "...)
			buf = s.events.appendEvent(buf, &evs[i])
			buf = append(buf, "\n\n"...)
		}
		f.after = through
		if len(buf) > 0 {
			if !send(buf) {
				return
			}
			keepAlive.Reset(ProgressStreamKeepAlive)
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-next:
		case <-keepAlive.C:
			if !send([]byte(": keep-alive\n\n")) {
				return
			}
			keepAlive.Reset(ProgressStreamKeepAlive)
		}
	}
}
