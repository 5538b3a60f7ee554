package server

import (
	"errors"
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

// loggedEvents returns the events of job id in GET /ojs/v1/events, oldest first.
func loggedEvents(t *testing.T, s *Server, id string) []map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?limit=1000", nil)
	var out []map[string]any
	for _, e := range r.body["events"].([]any) {
		if ev := e.(map[string]any); ev["subject"] == id {
			out = append(out, ev)
		}
	}
	return out
}

// loggedTypes returns the types of events.
func loggedTypes(events []map[string]any) []string {
	var out []string
	for _, e := range events {
		out = append(out, e["type"].(string))
	}
	return out
}

// waitLogged waits until the event log holds an event of job id of type typ, and returns the
// events of the job then.
func waitLogged(t *testing.T, s *Server, id, typ string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := loggedEvents(t, s, id)
		for _, e := range got {
			if e["type"] == typ {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s for job %s in the event log, which holds %v for it", typ, id, loggedTypes(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitClientEvent waits for an event of job id on ch, and returns nil if none comes.
func waitClientEvent(ch <-chan *pronto.Event, id string) *pronto.Event {
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.Job != nil && ev.Job.ID == id {
				return ev
			}
		case <-deadline:
			return nil
		}
	}
}

// pollState GETs job id until its state is want (the GET repairs it when its maintenance is due),
// and fails the test if it never is.
func pollState(t *testing.T, s *Server, id, want string) {
	t.Helper()
	var state any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		state = mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)["state"]
		if state == want {
			return
		}
	}
	t.Fatalf("job %s state %v, want %s", id, state, want)
}

// TestRepairReportsRescueDiscard: GET /ojs/v1/jobs/{id} of an OJS worker's job whose lease ran out
// on its last attempt discards it (repair) through the client, which reports it as the leader's
// rescue would: EventDiscarded (ErrJobLost) to subscribers, job.discarded and dead_letter.added in
// the event log.
func TestRepairReportsRescueDiscard(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			// The leader's rescue is made rare, so that the GET's repair is the one that rescues.
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{RescueInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			ch, unsub := client.Subscribe(pronto.EventDiscarded, pronto.EventRescued)
			defer unsub()
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"repair-rescue","retry":{"max_attempts":1}}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch",
				map[string]any{"queues": []string{"repair-rescue"}, "worker_id": "w1", "visibility_timeout_ms": 50})
			pollState(t, s, id, "discarded")
			ev := waitClientEvent(ch, id)
			if ev == nil || ev.Kind != pronto.EventDiscarded || !errors.Is(ev.Err, pronto.ErrJobLost) {
				t.Fatalf("Subscribe got %+v for the job the GET discarded, want EventDiscarded with ErrJobLost", ev)
			}
			waitLogged(t, s, id, "job.discarded")
			waitLogged(t, s, id, "dead_letter.added")
		})
	}
}

// TestExpiredJobEvent: a job whose expires_at passes before it starts is discarded (by the leader,
// or by a GET's repair) and reported as job.expired with its data (ojs-events.md 4.1), then
// dead_letter.added, and no job.discarded (no attempt failed); subscribers get EventDiscarded with
// ErrJobExpired.
func TestExpiredJobEvent(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			ch, unsub := client.Subscribe(pronto.EventDiscarded)
			defer unsub()
			created := time.Now()
			exp := created.Add(300 * time.Millisecond).UTC()
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"expiring","expires_at":"`+exp.Format(time.RFC3339Nano)+`"}}`)
			pollState(t, s, id, "discarded")
			ev := waitClientEvent(ch, id)
			if ev == nil || ev.Kind != pronto.EventDiscarded || !errors.Is(ev.Err, pronto.ErrJobExpired) {
				t.Fatalf("Subscribe got %+v for the expired job, want EventDiscarded with ErrJobExpired", ev)
			}
			got := waitLogged(t, s, id, "dead_letter.added")
			types := loggedTypes(got)
			if len(types) != 3 || types[0] != "job.enqueued" || types[1] != "job.expired" || types[2] != "dead_letter.added" {
				t.Fatalf("event log of the expired job %v, want [job.enqueued job.expired dead_letter.added]", types)
			}
			data := got[1]["data"].(map[string]any)
			if data["job_id"] != id || data["job_type"] != "a.b" || data["queue"] != "expiring" {
				t.Errorf("job.expired data %v: wrong job", data)
			}
			createdAt, err1 := time.Parse(time.RFC3339Nano, data["created_at"].(string))
			expiredAt, err2 := time.Parse(time.RFC3339Nano, data["expired_at"].(string))
			if err1 != nil || err2 != nil || createdAt.Sub(created).Abs() > 2*time.Second || expiredAt.Before(exp) {
				t.Errorf("job.expired data %v: created_at near %v and expired_at not before %v expected", data, created, exp)
			}
			// The TTL counts from the job's creation as the store recorded it (a loaded machine may
			// take a while between the request's clock read and the store's), not from the test's clock.
			want := exp.Sub(createdAt).Milliseconds()
			if ttl, _ := data["ttl_ms"].(float64); ttl < float64(want-1) || ttl > float64(want+1) {
				t.Errorf("job.expired ttl_ms %v, want %d: expires_at %v less created_at %v", data["ttl_ms"], want, exp, createdAt)
			}
		})
	}
}

// TestActivateRecordsEnqueuedOnce: a pending job has no job.enqueued until it is activated, and then
// exactly one (it enters the available state then, ojs-events.md 3.1).
func TestActivateRecordsEnqueuedOnce(t *testing.T) {
	s := newStoreServer(t, "memory")
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"activated","pending":true}}`)
	if got := loggedTypes(loggedEvents(t, s, id)); len(got) != 0 {
		t.Fatalf("a pending job's events %v, want none", got)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/jobs/"+id+"/activate", nil)
	if got := loggedTypes(loggedEvents(t, s, id)); len(got) != 1 || got[0] != "job.enqueued" {
		t.Fatalf("an activated job's events %v, want [job.enqueued]", got)
	}
}

// TestNackRequeueRecordsEnqueued: a job its worker hands back with a requeue nack is available again
// and gets a job.enqueued for it (ojs-events.md 3.1), and no job.failed (no attempt failed).
func TestNackRequeueRecordsEnqueued(t *testing.T) {
	s := newStoreServer(t, "memory")
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"requeued"}}`)
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"requeued"}, "worker_id": "w1"})
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","requeue":true}`)
	got := loggedTypes(loggedEvents(t, s, id))
	if len(got) != 3 || got[0] != "job.enqueued" || got[1] != "job.started" || got[2] != "job.enqueued" {
		t.Fatalf("events of a job fetched then requeued %v, want [job.enqueued job.started job.enqueued]", got)
	}
}

// TestUniqueReplaceReportsCancel: a unique job replaced by a new one (on_conflict replace) is
// cancelled and reported once: EventCancelled to subscribers and one job.cancelled in the event log
// (ojs-events.md 3.1), whether it was waiting or fetched by an OJS worker.
func TestUniqueReplaceReportsCancel(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s, client := storeServer(t, kind, Config{})
			ch, unsub := client.Subscribe(pronto.EventCancelled)
			defer unsub()
			body := `{"type":"report.build","args":[1],"options":{"queue":"replace-reported","unique":{"keys":["type","args"],"on_conflict":"replace"}}}`
			waiting := enqueueJob(t, s, body)
			fetched := enqueueJob(t, s, body)
			if waiting == fetched {
				t.Fatalf("replace returned the holder %s", waiting)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"replace-reported"}, "worker_id": "w1"})
			last := enqueueJob(t, s, body)
			for _, id := range []string{waiting, fetched} {
				if st := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)["state"]; st != "cancelled" {
					t.Fatalf("replaced job %s state %v, want cancelled", id, st)
				}
				if ev := waitClientEvent(ch, id); ev == nil || ev.Job.State != pronto.StateCancelled {
					t.Fatalf("Subscribe got %+v for the replaced job %s, want EventCancelled", ev, id)
				}
				waitLogged(t, s, id, "job.cancelled")
			}
			// Another insert's report would come by now: each cancel is reported once.
			enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"replace-reported"}}`)
			for _, id := range []string{waiting, fetched} {
				n := 0
				for _, typ := range loggedTypes(loggedEvents(t, s, id)) {
					if typ == "job.cancelled" {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("job %s has %d job.cancelled, want 1", id, n)
				}
			}
			if got := loggedTypes(loggedEvents(t, s, last)); len(got) != 1 || got[0] != "job.enqueued" {
				t.Fatalf("the replacing job's events %v, want [job.enqueued]", got)
			}
		})
	}
}
