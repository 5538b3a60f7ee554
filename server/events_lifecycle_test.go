package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// loggedData returns the data of the first event of subject (a job id or cron name) of type typ in
// GET /ojs/v1/events, waiting for it up to 15 s.
func loggedData(t *testing.T, s *Server, subject, typ string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		r := mustCall(t, s, 200, "GET", "/ojs/v1/events?limit=1000&types="+typ, nil)
		for _, e := range r.body["events"].([]any) {
			if ev := e.(map[string]any); ev["subject"] == subject {
				return ev["data"].(map[string]any)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s of %s in the event log", typ, subject)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCronSkippedEventNamesJobType: job_type is a required field of cron.skipped (ojs-events.md
// 4.5: "The job type that would have been enqueued"), as it is of cron.triggered.
func TestCronSkippedEventNamesJobType(t *testing.T) {
	s := newStoreServer(t, "memory")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.RunCron(ctx) }()
	defer func() { cancel(); <-done }()
	// No worker takes the first job: the next occurrences are skipped (overlap policy skip).
	mustCall(t, s, 201, "POST", "/ojs/v1/cron", `{"name":"skip-kind","expression":"@every 1s","overlap_policy":"skip","job_template":{"type":"report.generate","args":[],"options":{"queue":"cron-skip-kind"}}}`)
	if trig := loggedData(t, s, "skip-kind", "cron.triggered"); trig["job_type"] != "report.generate" {
		t.Fatalf("cron.triggered data %v, want job_type report.generate", trig)
	}
	skip := loggedData(t, s, "skip-kind", "cron.skipped")
	for _, f := range []string{"cron_name", "cron_expr", "job_type", "reason"} {
		if _, ok := skip[f].(string); !ok {
			t.Errorf("cron.skipped data %v: required string field %q missing (ojs-events.md 4.5)", skip, f)
		}
	}
	if skip["job_type"] != "report.generate" {
		t.Errorf("cron.skipped job_type %v, want report.generate", skip["job_type"])
	}
	// The filters of GET /ojs/v1/events see it as the job type's and the queue's.
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=cron.skipped&job_types=report.generate&queues=cron-skip-kind", nil)
	if n := len(r.body["events"].([]any)); n == 0 {
		t.Errorf("no cron.skipped selected by its job type and queue: %s", r.raw)
	}
}

// TestJobEventsCarryTraceID: every event of a job with trace context carries its trace_id in the
// data (ojs-events.md 8.1, 8.3), from meta.trace_id, or from meta.traceparent when it comes alone
// (8.2); a job without either has none.
func TestJobEventsCarryTraceID(t *testing.T) {
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	cases := []struct {
		name, meta, want string
	}{
		{"both", `{"traceparent":"00-` + trace + `-00f067aa0ba902b7-01","trace_id":"` + trace + `"}`, trace},
		{"trace_id alone", `{"trace_id":"test-trace-020"}`, "test-trace-020"},
		{"traceparent alone", `{"traceparent":"00-` + trace + `-00f067aa0ba902b7-01"}`, trace},
		{"malformed traceparent", `{"traceparent":"00-` + trace + `-00f067aa0ba902b7"}`, ""},
		{"zero trace id", `{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}`, ""},
		{"neither", `{"tenant":"x"}`, ""},
	}
	s := newStoreServer(t, "memory")
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := fmt.Sprint("trace-", i)
			id := enqueueJob(t, s, `{"type":"order.process","args":[],"meta":`+c.meta+`,"options":{"queue":"`+q+`"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{q}, "worker_id": "w1"})
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": id, "result": map[string]any{"ok": true}})
			for _, typ := range []string{"job.enqueued", "job.started", "job.completed"} {
				d := loggedData(t, s, id, typ)
				if got, ok := d["trace_id"]; c.want == "" && ok {
					t.Errorf("%s data %v: trace_id %v, want none", typ, d, got)
				} else if c.want != "" && got != c.want {
					t.Errorf("%s data %v: trace_id %v, want %s", typ, d, got, c.want)
				}
			}
		})
	}
	t.Run("failed and discarded", func(t *testing.T) {
		id := enqueueJob(t, s, `{"type":"order.process","args":[],"meta":{"trace_id":"t-fail"},"options":{"queue":"trace-fail","retry":{"max_attempts":1}}}`)
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"trace-fail"}, "worker_id": "w1"})
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", map[string]any{"job_id": id, "error": map[string]any{"message": "boom"}})
		for _, typ := range []string{"job.failed", "job.discarded"} {
			if d := loggedData(t, s, id, typ); d["trace_id"] != "t-fail" {
				t.Errorf("%s data %v: trace_id %v, want t-fail", typ, d, d["trace_id"])
			}
		}
	})
}

// lifecycleOrderOK reports whether types, the events of one job oldest first, hold one job.enqueued,
// before job.started, before job.completed (ojs-events.md 5.2 item 4).
func lifecycleOrderOK(types []string) bool {
	pos, enqueued := map[string]int{}, 0
	for i, typ := range types {
		if _, ok := pos[typ]; !ok {
			pos[typ] = i
		}
		if typ == "job.enqueued" {
			enqueued++
		}
	}
	e, ok1 := pos["job.enqueued"]
	st, ok2 := pos["job.started"]
	if enqueued != 1 || !ok1 || !ok2 || e > st {
		return false
	}
	c, ok := pos["job.completed"]
	return !ok || c > st
}

// fetchAndAck fetches a job of queue as an OJS worker and acks it; it returns the job's id, or "".
func fetchAndAck(t *testing.T, s *Server, queue, worker string) string {
	r := call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{queue}, "worker_id": worker})
	if r.status != 200 {
		return ""
	}
	jobs, _ := r.body["jobs"].([]any)
	if len(jobs) == 0 {
		return ""
	}
	id := jobs[0].(map[string]any)["id"].(string)
	call(t, s, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": id})
	return id
}

// TestCronJobEnqueuedBeforeStarted: the job.enqueued of a job cron inserts comes before its
// job.started and job.completed (ojs-events.md 5.2 item 4), even when OJS workers polling its queue
// take it before the scheduler has advanced the schedule and recorded the occurrence.
func TestCronJobEnqueuedBeforeStarted(t *testing.T) {
	s := newStoreServer(t, "postgres")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.RunCron(ctx) }()
	got := make(chan string, 100)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if id := fetchAndAck(t, s, "cron-order", fmt.Sprint("w", w)); id != "" {
					got <- id
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait(); <-done }()
	mustCall(t, s, 201, "POST", "/ojs/v1/cron", `{"name":"order","expression":"@every 1s","job_template":{"type":"c.t","args":[],"options":{"queue":"cron-order"}}}`)
	var ids []string
	for deadline := time.After(60 * time.Second); len(ids) < 8; {
		select {
		case id := <-got:
			ids = append(ids, id)
		case <-deadline:
			t.Fatalf("only %d cron jobs ran in 60 s", len(ids))
		}
	}
	for _, id := range ids {
		waitLogged(t, s, id, "job.enqueued")
		if types := loggedTypes(waitLogged(t, s, id, "job.completed")); !lifecycleOrderOK(types) {
			t.Errorf("cron job %s: events %v, want one job.enqueued, then job.started, then job.completed", id, types)
		}
	}
}

// TestEnqueuedBeforeStartedWhenFetchedDuringInsert: a worker that fetches and completes a job
// while the insert call that made it has not returned yet (here an insert middleware does it, as
// one exporting a span may take its time) still finds job.enqueued first among the job's events,
// recorded once.
func TestEnqueuedBeforeStartedWhenFetchedDuringInsert(t *testing.T) {
	for _, path := range []struct{ name, endpoint, body string }{
		{"enqueue", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"during-insert"}}`},
		{"batch", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[],"options":{"queue":"during-insert"}}]}`},
		{"bulk", "/ojs/v1/jobs/bulk", `{"jobs":[{"type":"a.b","args":[],"options":{"queue":"during-insert"}}]}`},
		{"workflow", "/ojs/v1/workflows", `{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"queue":"during-insert"}}]}`},
	} {
		t.Run(path.name, func(t *testing.T) {
			var s *Server
			var fetched string
			client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
				func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
					rows, err := next(ctx, ps)
					if err == nil {
						fetched = fetchAndAck(t, s, "during-insert", "w1")
					}
					return rows, err
				},
			}})
			if err != nil {
				t.Fatal(err)
			}
			s, _ = newTestServer(t, Config{Client: client})
			r := call(t, s, "POST", path.endpoint, path.body)
			if r.status/100 != 2 {
				t.Fatalf("%s: %d %s", path.endpoint, r.status, r.raw)
			}
			if fetched == "" {
				t.Fatal("the worker fetched nothing during the insert")
			}
			types := loggedTypes(waitLogged(t, s, fetched, "job.completed"))
			if !lifecycleOrderOK(types) {
				t.Fatalf("events of the job %v, want one job.enqueued, then job.started, then job.completed (ojs-events.md 5.2)", types)
			}
		})
	}
}

// TestRescuedJobEnqueuedAgain: a job whose OJS worker lost it (its lease ran out) is back in
// available, and job.enqueued is recorded on every entry into available (ojs-events.md 3.1), as for
// a requeue nack: its second job.started follows a second job.enqueued.
func TestRescuedJobEnqueuedAgain(t *testing.T) {
	s := newStoreServer(t, "memory")
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"rescue","retry":{"max_attempts":3}}}`)
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch",
		map[string]any{"queues": []string{"rescue"}, "worker_id": "w1", "visibility_timeout_ms": 50})
	// Reading the job rescues it once its lease ran out (the leader's pass would, a moment later).
	deadline := time.Now().Add(15 * time.Second)
	for mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)["state"] == "active" {
		if time.Now().After(deadline) {
			t.Fatal("the job is still active 15 s after its lease ran out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for enqueued := 0; enqueued < 2; {
		enqueued = 0
		for _, typ := range loggedTypes(loggedEvents(t, s, id)) {
			if typ == "job.enqueued" {
				enqueued++
			}
		}
		if enqueued < 2 && time.Now().After(deadline) {
			t.Fatalf("events of the rescued job %v: no job.enqueued for its return to available", loggedTypes(loggedEvents(t, s, id)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"rescue"}, "worker_id": "w2"})
	if n := len(r.body["jobs"].([]any)); n != 1 {
		t.Fatalf("the rescued job was not fetched again: %s", r.raw)
	}
	types := loggedTypes(loggedEvents(t, s, id))
	want := []string{"job.enqueued", "job.started", "job.enqueued", "job.started"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("events of the rescued job %v, want %v", types, want)
	}
}

// TestEnqueuedBeforeGoWorkerOutcomeDuringInsert: a Go worker of the server's own client may
// complete a job, and its outcome be reported, before the insert call that made it returns: the
// job's job.enqueued still comes first, recorded once.
func TestEnqueuedBeforeGoWorkerOutcomeDuringInsert(t *testing.T) {
	var s *Server
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[emailArgs]) error { return nil }))
	client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{
		Queues: map[string]pronto.QueueConfig{"mail-order": {MaxWorkers: 1}}, Workers: workers,
		InsertMiddleware: []pronto.InsertMiddleware{
			func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
				rows, err := next(ctx, ps)
				if err == nil {
					waitLogged(t, s, rows[0].ID, "job.completed") // the outcome is reported first
				}
				return rows, err
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = newTestServer(t, Config{Client: client})
	r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"to":"a@example.com"}],"options":{"queue":"mail-order"}}`)
	id := r.body["job"].(map[string]any)["id"].(string)
	types := loggedTypes(loggedEvents(t, s, id))
	want := []string{"job.enqueued", "job.completed"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("events of the job %v, want %v", types, want)
	}
}
