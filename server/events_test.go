package server

import (
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// The events whose data is kept as fields read the same as when their data was written at once.
func TestEventFormsMatchData(t *testing.T) {
	s := &Server{events: newEventLog(100), source: "ojs://pronto/api"}
	j := &pronto.JobRow{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Kind: "email.send", Queue: "q\"é",
		Priority: -3, Attempt: 2, Result: []byte(`{"ok":true}`)}
	at := time.Now()
	for _, c := range []struct {
		typ  string
		form event
		more func([]byte) []byte
	}{
		{"job.enqueued", event{form: formEnqueued, n1: int64(j.Priority)}, func(b []byte) []byte {
			return appendIntField(b, "priority", int64(j.Priority))
		}},
		{"job.started", event{form: formStarted, n1: int64(j.Attempt), worker: "w\n1"}, func(b []byte) []byte {
			b = appendStringField(b, "worker_id", "w\n1")
			return appendIntField(b, "attempt", int64(j.Attempt))
		}},
		{"job.completed", event{form: formCompleted, n1: int64(j.Attempt), n2: 1234, raw: j.Result}, func(b []byte) []byte {
			b = appendIntField(b, "duration_ms", 1234)
			b = appendIntField(b, "attempt", int64(j.Attempt))
			return appendRawField(b, "result", j.Result)
		}},
		{"job.completed", event{form: formCompleted, n1: 1, n2: 0}, func(b []byte) []byte {
			b = appendIntField(b, "duration_ms", 0)
			return appendIntField(b, "attempt", 1)
		}},
	} {
		s.events.reset()
		s.jobEvent(c.typ, j, at, c.more)
		s.jobEventForm(c.typ, j, at, c.form)
		evs, _ := s.events.query(eventFilter{limit: 10})
		if len(evs) != 2 {
			t.Fatalf("%s: %d events", c.typ, len(evs))
		}
		want := string(s.events.appendEvent(nil, &evs[0]))
		evs[1].seq = evs[0].seq // the id differs by the sequence number alone
		if got := string(s.events.appendEvent(nil, &evs[1])); got != want {
			t.Errorf("%s:\n got %s\nwant %s", c.typ, got, want)
		}
	}
}
