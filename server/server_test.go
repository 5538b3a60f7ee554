package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

func TestEnqueueFetchAck(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/jobs", map[string]any{"type": "email.send", "args": []any{"a@example.com"}})
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	if r.header.Get("OJS-Version") != "1.0" || r.header.Get("X-Request-Id") == "" || r.header.Get("Content-Type") != ojsMediaType {
		t.Fatalf("headers: %v", r.header)
	}
	id := r.body["job"].(map[string]any)["id"].(string)
	if loc := r.header.Get("Location"); loc != "/ojs/v1/jobs/"+id {
		t.Fatalf("Location %q", loc)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"default"}, "worker_id": "w1"})
	jobs := r.body["jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["id"] != id || jobs[0].(map[string]any)["state"] != "active" {
		t.Fatalf("fetch: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": "w1", "active_jobs": []string{id}})
	if r.body["state"] != "running" || len(r.body["jobs_extended"].([]any)) != 1 {
		t.Fatalf("heartbeat: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": id, "worker_id": "w1", "result": map[string]any{"ok": true}})
	if r.status != 200 || r.body["state"] != "completed" {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
	job := r.body["job"].(map[string]any)
	if job["state"] != "completed" || job["result"].(map[string]any)["ok"] != true {
		t.Fatalf("get: %s", r.raw)
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": id}), 409, CodeConflict)
}

func TestRequestSafety(t *testing.T) {
	s, _ := newTestServer(t, Config{MaxBodyBytes: 1024})
	big := `{"type":"a.b","args":["` + strings.Repeat("x", 2000) + `"]}`
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", big), 413, CodePayloadTooLarge)

	// A body larger than the limit without a Content-Length (chunked) is cut off too.
	req := httptest.NewRequest("POST", "/ojs/v1/jobs", strings.NewReader(big))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Fatalf("chunked oversized body: %d %s", rec.Code, rec.Body)
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"malformed JSON", "POST", "/ojs/v1/jobs", `{ invalid json }`, 400, CodeInvalidPayload},
		{"not an object", "POST", "/ojs/v1/jobs", `[1,2]`, 400, CodeInvalidRequest},
		{"empty body", "POST", "/ojs/v1/jobs", ``, 400, CodeInvalidRequest},
		{"args not array", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":{}}`, 400, CodeInvalidRequest},
		{"priority wrong type", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"priority":true}}`, 400, CodeInvalidRequest},
		{"priority fraction", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"priority":1.5}}`, 400, CodeInvalidRequest},
		{"bad scheduled_at", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"scheduled_at":"tomorrow"}}`, 400, CodeInvalidRequest},
		{"reserved meta key", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"_pronto":1}}`, 400, CodeInvalidRequest},
		{"retry coefficient", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":{"backoff_coefficient":0.5}}}`, 422, CodeInvalidRequest},
		{"bad job id", "GET", "/ojs/v1/jobs/NOT-AN-ID", nil, 400, CodeInvalidRequest},
		{"unknown job", "GET", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000", nil, 404, CodeNotFound},
		{"unknown route", "GET", "/ojs/v1/nope", nil, 404, CodeNotFound},
		{"outside the API", "GET", "/", nil, 404, CodeNotFound},
		{"wrong method", "PUT", "/ojs/v1/jobs", `{}`, 405, CodeMethodNotAllowed},
		{"fetch without queues", "POST", "/ojs/v1/workers/fetch", `{}`, 400, CodeInvalidRequest},
		{"fetch count", "POST", "/ojs/v1/workers/fetch", `{"queues":["a"],"count":0}`, 400, CodeInvalidRequest},
		{"ack bad id", "POST", "/ojs/v1/workers/ack", `{"job_id":"x"}`, 400, CodeInvalidRequest},
		{"nack no error", "POST", "/ojs/v1/workers/nack", `{"job_id":"019539a4-0000-7000-8000-000000000000"}`, 400, CodeInvalidRequest},
		{"heartbeat no worker", "POST", "/ojs/v1/workers/heartbeat", `{}`, 400, CodeInvalidRequest},
		{"bad queue name", "POST", "/ojs/v1/queues/Bad!/pause", nil, 400, CodeInvalidRequest},
		{"events limit", "GET", "/ojs/v1/events?limit=x", nil, 400, CodeInvalidRequest},
		{"cron bad expression", "POST", "/ojs/v1/cron", `{"name":"c","expression":"61 * * * *","job_template":{"type":"a.b","args":[]}}`, 400, CodeInvalidRequest},
		{"cron bad zone", "POST", "/ojs/v1/cron", `{"name":"c","expression":"* * * * *","timezone":"EST","job_template":{"type":"a.b","args":[]}}`, 400, CodeInvalidRequest},
		{"reset off by default", "POST", "/ojs/v1/_test/reset", nil, 404, CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrorBody(t, call(t, s, tc.method, tc.path, tc.body), tc.status, tc.code)
		})
	}

	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, "Content-Type", "text/plain")
	checkErrorBody(t, r, 400, CodeInvalidRequest)

	// Nothing refused above was stored.
	r = call(t, s, "GET", "/ojs/v1/queues", nil)
	if qs := r.body["queues"].([]any); len(qs) != 0 {
		t.Fatalf("refused requests stored jobs: %s", r.raw)
	}
}

func TestRequestIDEcho(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "GET", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000", nil, "X-Request-Id", "req_mine")
	if r.header.Get("X-Request-Id") != "req_mine" {
		t.Fatalf("request id not echoed: %v", r.header)
	}
	checkErrorBody(t, r, 404, CodeNotFound)
}

func TestAPIKey(t *testing.T) {
	s, _ := newTestServer(t, Config{APIKey: "s3cret"})
	if r := call(t, s, "GET", "/ojs/v1/health", nil); r.status != 200 {
		t.Fatalf("health needs no key: %d", r.status)
	}
	checkErrorBody(t, call(t, s, "GET", "/ojs/manifest", nil), 401, CodeUnauthenticated)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/queues", nil, "Authorization", "Bearer wrong"), 401, CodeUnauthenticated)
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`), 401, CodeUnauthenticated)
	if r := call(t, s, "GET", "/ojs/v1/queues", nil, "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("with the key: %d %s", r.status, r.raw)
	}
	// The scheme is case-insensitive (RFC 7235); the key is not.
	for _, h := range []string{"bearer s3cret", "BEARER s3cret", "bEaReR   s3cret"} {
		if r := call(t, s, "GET", "/ojs/v1/queues", nil, "Authorization", h); r.status != 200 {
			t.Fatalf("%q: %d %s", h, r.status, r.raw)
		}
	}
	for _, h := range []string{"bearer S3CRET", "Basic s3cret", "Bearers3cret", "Bearer", "s3cret"} {
		checkErrorBody(t, call(t, s, "GET", "/ojs/v1/queues", nil, "Authorization", h), 401, CodeUnauthenticated)
	}
}

func TestCheckListenAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, key string
		ok        bool
	}{
		{"127.0.0.1:8080", "", true},
		{"[::1]:8080", "", true},
		{"localhost:8080", "", true},
		{"0.0.0.0:8080", "", false},
		{":8080", "", false},
		{"10.1.2.3:8080", "", false},
		{"0.0.0.0:8080", "key", true},
		{"nonsense", "", false},
	} {
		if err := CheckListenAddr(tc.addr, tc.key); (err == nil) != tc.ok {
			t.Errorf("CheckListenAddr(%q, %q) = %v", tc.addr, tc.key, err)
		}
	}
	hs := NewHTTPServer("127.0.0.1:0", http.NotFoundHandler())
	if hs.ReadHeaderTimeout == 0 || hs.ReadTimeout == 0 || hs.WriteTimeout == 0 || hs.IdleTimeout == 0 {
		t.Fatal("timeouts not set")
	}
}

// emailArgs is a typed Go job that OJS workers see as args [{"to": ...}].
type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email.send" }

// A job enqueued over HTTP is worked by a Go worker registered on the same client, and a job
// inserted from Go is fetched over HTTP, args as the one-element array of the typed struct.
func TestGoWorkerInterop(t *testing.T) {
	st := memory.New()
	var got atomic.Value
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[emailArgs]) error {
		got.Store(j.Args.To)
		return nil
	}))
	client, err := pronto.NewClient(st, &pronto.Config{
		Queues: map[string]pronto.QueueConfig{"mail": {MaxWorkers: 2}}, Workers: workers,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})

	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"to":"http@example.com"}],"options":{"queue":"mail"}}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %s", r.raw)
	}
	id := r.body["job"].(map[string]any)["id"].(string)
	deadline := time.Now().Add(5 * time.Second)
	for {
		j := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
		if j["state"] == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Go worker did not complete the HTTP job: %v", j)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() != "http@example.com" {
		t.Fatalf("the Go worker decoded %v", got.Load())
	}

	row, err := client.Insert(context.Background(), emailArgs{To: "go@example.com"}, &pronto.InsertOpts{Queue: "remote-only"})
	if err != nil {
		t.Fatal(err)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["remote-only"],"worker_id":"py"}`)
	jobs := r.body["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("fetch: %s", r.raw)
	}
	j := jobs[0].(map[string]any)
	args, _ := json.Marshal(j["args"])
	if j["id"] != row.ID || j["type"] != "email.send" || string(args) != `[{"to":"go@example.com"}]` {
		t.Fatalf("the Go job over HTTP: %s", r.raw)
	}
}

func TestRetryAndDeadLetter(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":{"max_attempts":2,"initial_interval":"PT0.05S","jitter":false,"non_retryable_errors":["fatal.*"],"on_exhaustion":"dead_letter"}}}`)
	id := r.body["job"].(map[string]any)["id"].(string)
	call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"]}`)
	r = call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","error":{"code":"handler_error","message":"boom"}}`)
	if r.body["state"] != "retryable" || r.body["retry_delay_ms"].(float64) != 50 {
		t.Fatalf("first nack: %s", r.raw)
	}
	time.Sleep(60 * time.Millisecond)
	call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"]}`)
	r = call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","error":{"type":"fatal.bad","message":"no"}}`)
	if r.body["state"] != "discarded" {
		t.Fatalf("second nack: %s", r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/dead-letter", nil)
	if dl := r.body["jobs"].([]any); len(dl) != 1 {
		t.Fatalf("dead letter: %s", r.raw)
	}
	job := r.body["jobs"].([]any)[0].(map[string]any)
	if errs := job["errors"].([]any); len(errs) != 2 || job["retry"].(map[string]any)["on_exhaustion"] != "dead_letter" {
		t.Fatalf("dead-letter job: %v", job)
	}
	// Each entry carries its attempt's start, before the failure, the second after the first.
	var starts []time.Time
	for _, e := range job["errors"].([]any) {
		e := e.(map[string]any)
		startedText, _ := e["started_at"].(string)
		occurredText, _ := e["occurred_at"].(string)
		started, err1 := time.Parse(time.RFC3339Nano, startedText)
		occurred, err2 := time.Parse(time.RFC3339Nano, occurredText)
		if err1 != nil || err2 != nil || occurred.Before(started) {
			t.Fatalf("error entry's started_at and occurred_at: %v", e)
		}
		starts = append(starts, started)
	}
	if starts[1].Before(starts[0]) {
		t.Fatalf("attempt 2 started before attempt 1: %v", starts)
	}
	r = call(t, s, "POST", "/ojs/v1/dead-letter/"+id+"/retry", nil)
	if r.body["job"].(map[string]any)["state"] != "available" {
		t.Fatalf("retry: %s", r.raw)
	}
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/dead-letter/"+id, nil), 409, CodeConflict)

	// on_exhaustion "discard" keeps a job out of the dead-letter list.
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"q2","retry":{"max_attempts":1,"on_exhaustion":"discard"}}}`)
	id2 := r.body["job"].(map[string]any)["id"].(string)
	call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["q2"]}`)
	call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id2+`","error":{"message":"x"}}`)
	r = call(t, s, "GET", "/ojs/v1/dead-letter?queue=q2", nil)
	if dl := r.body["jobs"].([]any); len(dl) != 0 {
		t.Fatalf("a discard job in the dead-letter list: %s", r.raw)
	}
}

func TestEventsAndCron(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"every-sec","expression":"@every 1s","job_template":{"type":"tick.tock","args":[1],"options":{"queue":"ticks"}}}`)
	if r.status != 201 || r.body["cron"].(map[string]any)["next_run_at"] == nil {
		t.Fatalf("register: %d %s", r.status, r.raw)
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/cron", `{"name":"every-sec","expression":"@every 1s","job_template":{"type":"tick.tock","args":[]}}`), 409, CodeDuplicate)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunCron(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = call(t, s, "GET", "/ojs/v1/events?types=cron.*", nil)
		if len(r.body["events"].([]any)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cron did not fire")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["ticks"]}`)
	if len(r.body["jobs"].([]any)) != 1 {
		t.Fatalf("the cron job: %s", r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/events?types=job.started,job.enqueued&queues=ticks", nil)
	if len(r.body["events"].([]any)) != 2 {
		t.Fatalf("events: %s", r.raw)
	}
	r = call(t, s, "DELETE", "/ojs/v1/cron/every-sec", nil)
	if r.body["deleted"] != true {
		t.Fatalf("delete: %s", r.raw)
	}
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/cron/every-sec", nil), 404, CodeNotFound)
}

func TestEventLog(t *testing.T) {
	l := newEventLog(4)
	for i := 0; i < 6; i++ {
		l.add(event{typ: "job.enqueued", queue: []string{"a", "b"}[i%2], data: []byte(`{}`)})
	}
	evs, more := l.query(eventFilter{limit: 10})
	if len(evs) != 4 || more || evs[0].seq != 3 || evs[3].seq != 6 {
		t.Fatalf("ring: %+v %v", evs, more)
	}
	evs, more = l.query(eventFilter{queues: []string{"a"}, limit: 1})
	if len(evs) != 1 || !more || evs[0].seq != 3 {
		t.Fatalf("filter and limit: %+v %v", evs, more)
	}
	id := l.eventID(&evs[0])
	if !strings.HasPrefix(id, "evt_") || len(id) != 40 {
		t.Fatalf("id %q", id)
	}
	seq, ok := parseEventSeq(id)
	if !ok || seq != 3 {
		t.Fatalf("parse %q: %d %v", id, seq, ok)
	}
	evs, _ = l.query(eventFilter{after: seq, types: []string{"job.*"}, limit: 10})
	if len(evs) != 3 || evs[0].seq != 4 {
		t.Fatalf("after: %+v", evs)
	}
	if _, ok := parseEventSeq("evt_nope"); ok {
		t.Fatal("parsed a bad id")
	}
}

// An outcome for a fetched job that moved on since (here: cancelled) is refused with the job's
// state, although the server remembers the job as fetched.
func TestOutcomeAfterCancel(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`)
	id := r.body["job"].(map[string]any)["id"].(string)
	call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"worker_id":"w"}`)
	if r := call(t, s, "DELETE", "/ojs/v1/jobs/"+id, nil); r.status != 200 {
		t.Fatalf("cancel: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w"}`)
	checkErrorBody(t, r, 409, CodeConflict)
	if st := r.body["error"].(map[string]any)["details"].(map[string]any)["current_state"]; st != "cancelled" {
		t.Fatalf("current_state %v", st)
	}
	j := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
	if j["state"] != "cancelled" {
		t.Fatalf("state %v", j["state"])
	}
}
