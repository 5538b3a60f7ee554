package server

// The project's own OJS conformance tests: the behaviour of each conformance level (0 to 4), written
// from the OJS specification (ojs-conformance.md, ojs-http-binding.md and the feature documents), on
// every store: memory, SQLite and PostgreSQL. They need nothing beside the repository but a running
// PostgreSQL. The official OJS case files, when present, run in addition (server/conformance).
//
// Tests wait on conditions (a job becoming fetchable, a state reached) with generous deadlines and
// assert order and outcome, never how long something took.

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// ojsWait bounds every wait on a condition: generous, so that a loaded machine passes.
const ojsWait = 20 * time.Second

// ojsEnv is one store behind a Server.
type ojsEnv struct {
	t *testing.T
	s *Server
}

// forEachOJSStore runs f as a parallel subtest per store, each on a fresh store behind a Server
// whose client runs maintenance (rescue of expired leases, scheduled jobs) and cron.
func forEachOJSStore(t *testing.T, f func(e *ojsEnv)) {
	t.Helper()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(newOJSEnv(t, kind))
		})
	}
}

func newOJSEnv(t *testing.T, kind string) *ojsEnv {
	t.Helper()
	ctx := context.Background()
	st := openStore(t, kind)
	client, err := pronto.NewClient(st, &pronto.Config{
		PollInterval: 100 * time.Millisecond, RescueInterval: 100 * time.Millisecond, LeaderTTL: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client, Backend: kind})
	cronCtx, stopCron := context.WithCancel(ctx)
	cronDone := make(chan struct{})
	go func() {
		defer close(cronDone)
		_ = s.RunCron(cronCtx)
	}()
	t.Cleanup(func() { stopCron(); <-cronDone })
	return &ojsEnv{t: t, s: s}
}

// do sends a request and returns the answer.
func (e *ojsEnv) do(method, path string, body any) *response {
	e.t.Helper()
	return call(e.t, e.s, method, path, body)
}

// must sends a request and fails unless the answer has the status.
func (e *ojsEnv) must(status int, method, path string, body any) *response {
	e.t.Helper()
	r := e.do(method, path, body)
	if r.status != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, status, r.raw)
	}
	return r
}

// enqueue pushes a job (a JSON object as a string) and returns the job object of the answer.
func (e *ojsEnv) enqueue(body string) map[string]any {
	e.t.Helper()
	return jobOf(e.t, e.must(201, "POST", "/ojs/v1/jobs", body))
}

// info returns the job's current object.
func (e *ojsEnv) info(id string) map[string]any {
	e.t.Helper()
	return jobOf(e.t, e.must(200, "GET", "/ojs/v1/jobs/"+id, nil))
}

// fetch fetches at most n jobs from the queues.
func (e *ojsEnv) fetch(n int, queues ...string) []map[string]any {
	e.t.Helper()
	q, _ := json.Marshal(queues)
	r := e.must(200, "POST", "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":%s,"count":%d,"worker_id":"w-ojs"}`, q, n))
	raw, ok := r.body["jobs"].([]any)
	if !ok {
		e.t.Fatalf("fetch: no jobs array: %s", r.raw)
	}
	out := make([]map[string]any, len(raw))
	for i, j := range raw {
		out[i] = j.(map[string]any)
	}
	return out
}

// fetchWhenDue polls the queue until it hands out a job, and returns it with when it was handed out.
func (e *ojsEnv) fetchWhenDue(queue string) (map[string]any, time.Time) {
	e.t.Helper()
	deadline := time.Now().Add(ojsWait)
	for {
		if jobs := e.fetch(1, queue); len(jobs) == 1 {
			return jobs[0], time.Now()
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no job became fetchable from %s within %v", queue, ojsWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *ojsEnv) ack(id string, result string) map[string]any {
	e.t.Helper()
	return e.must(200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w-ojs","result":`+result+`}`).body
}

func (e *ojsEnv) nack(id, errType string) map[string]any {
	e.t.Helper()
	return e.must(200, "POST", "/ojs/v1/workers/nack",
		`{"job_id":"`+id+`","worker_id":"w-ojs","error":{"type":"`+errType+`","message":"it broke"}}`).body
}

func jobOf(t *testing.T, r *response) map[string]any {
	t.Helper()
	j, ok := r.body["job"].(map[string]any)
	if !ok {
		t.Fatalf("no job object: %d %s", r.status, r.raw)
	}
	return j
}

func ids(jobs []map[string]any) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i], _ = j["id"].(string)
	}
	return out
}

var rfc3339UTC = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Level 0: the envelope, PUSH, FETCH, ACK, FAIL, the lifecycle and the wire format.
func TestOJSLevel0Core(t *testing.T) {
	forEachOJSStore(t, func(e *ojsEnv) {
		t := e.t
		// PUSH: 201, the OJS headers, a Location, a generated UUIDv7, the default queue, args kept
		// as sent, and an unknown envelope field accepted (forward compatibility).
		r := e.must(201, "POST", "/ojs/v1/jobs",
			`{"type":"email.send","args":["a@example.com",{"n":1,"ok":true,"x":null,"l":[1.5]}],"some_future_field":{"a":1}}`)
		if r.header.Get("Content-Type") != ojsMediaType || r.header.Get("OJS-Version") == "" || r.header.Get("X-Request-Id") == "" {
			t.Fatalf("headers: %v", r.header)
		}
		j := jobOf(t, r)
		id, _ := j["id"].(string)
		if !uuidV7.MatchString(id) {
			t.Fatalf("generated id %q is not a UUIDv7", id)
		}
		if r.header.Get("Location") != "/ojs/v1/jobs/"+id {
			t.Fatalf("Location %q", r.header.Get("Location"))
		}
		args, _ := json.Marshal(j["args"])
		if j["type"] != "email.send" || j["queue"] != "default" || j["state"] != "available" ||
			string(args) != `["a@example.com",{"l":[1.5],"n":1,"ok":true,"x":null}]` {
			t.Fatalf("enqueued job: %s", r.raw)
		}
		if a, _ := j["attempt"].(float64); a != 0 {
			t.Fatalf("attempt before any fetch: %v", j["attempt"])
		}
		for _, f := range []string{"created_at", "enqueued_at"} {
			if ts, _ := j[f].(string); !rfc3339UTC.MatchString(ts) {
				t.Fatalf("%s %q is not an RFC 3339 UTC timestamp", f, j[f])
			}
		}

		// A client-chosen UUIDv7 is kept; the default queue is listed.
		mine := "019539a4-1234-7000-8000-00000000abcd"
		if j := e.enqueue(`{"id":"` + mine + `","type":"report.build","args":[]}`); j["id"] != mine {
			t.Fatalf("client id not kept: %v", j["id"])
		}
		if qs := e.must(200, "GET", "/ojs/v1/queues", nil).raw; !strings.Contains(string(qs), `"default"`) {
			t.Fatalf("the default queue is not listed: %s", qs)
		}

		// FETCH hands out each available job once, oldest first, as active with attempt 1.
		got := e.fetch(10, "default")
		if len(got) != 2 || got[0]["id"] != id || got[1]["id"] != mine {
			t.Fatalf("fetch: %v", ids(got))
		}
		for _, g := range got {
			if g["state"] != "active" || g["attempt"] != 1.0 {
				t.Fatalf("fetched job: %v", g)
			}
		}
		if more := e.fetch(10, "default"); len(more) != 0 {
			t.Fatalf("an active job was handed out again: %v", ids(more))
		}
		if e.info(id)["state"] != "active" {
			t.Fatal("INFO does not show the fetched job active")
		}

		// ACK: completed, with the result kept; a second ACK is a 409 conflict.
		if a := e.ack(id, `{"sent":true}`); a["state"] != "completed" || a["acknowledged"] != true || a["job_id"] != id {
			t.Fatalf("ack: %v", a)
		}
		done := e.info(id)
		if res, _ := json.Marshal(done["result"]); done["state"] != "completed" || string(res) != `{"sent":true}` {
			t.Fatalf("completed job: %v", done)
		}
		checkErrorBody(t, e.do("POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w-ojs"}`), 409, CodeConflict)

		// FAIL with max_attempts 1: discarded, with the structured error recorded.
		one := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"once","retry":{"max_attempts":1}}}`)
		e.fetch(1, "once")
		if n := e.nack(one["id"].(string), "Boom"); n["state"] != "discarded" {
			t.Fatalf("nack of the last attempt: %v", n)
		}
		if raw, _ := json.Marshal(e.info(one["id"].(string))); !strings.Contains(string(raw), "it broke") {
			t.Fatalf("the failure's message is not recorded: %s", raw)
		}
		// ACK of a job that was never fetched is a conflict (available -> completed is not a transition).
		fresh := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"never"}}`)
		checkErrorBody(t, e.do("POST", "/ojs/v1/workers/ack", `{"job_id":"`+fresh["id"].(string)+`"}`), 409, CodeConflict)

		// The envelope rules: type and queue patterns, args an array; nothing refused is stored.
		for _, bad := range []string{
			`{"args":[]}`,
			`{"type":"","args":[]}`,
			`{"type":"1digit.first","args":[]}`,
			`{"type":"a.b","args":{"not":"an array"}}`,
			`{"type":"a.b","args":[],"options":{"queue":"Upper"}}`,
			`{"type":"a.b","args":[],"options":{"queue":"-dash-first"}}`,
		} {
			r := e.do("POST", "/ojs/v1/jobs", bad)
			if r.status != 400 {
				t.Fatalf("%s: status %d, want 400: %s", bad, r.status, r.raw)
			}
			checkErrorBody(t, r, 400, "")
		}
		checkErrorBody(t, e.do("GET", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000001", nil), 404, CodeNotFound)

		// The manifest and health endpoints answer.
		if m := e.must(200, "GET", "/ojs/manifest", nil); m.body["conformance_level"] == nil {
			t.Fatalf("manifest: %s", m.raw)
		}
		e.must(200, "GET", "/ojs/v1/health", nil)
	})
}

// Level 1: retries with backoff, non-retryable errors, the dead letter queue, heartbeats, the
// visibility timeout, cancellation.
func TestOJSLevel1Reliable(t *testing.T) {
	forEachOJSStore(t, func(e *ojsEnv) {
		t := e.t
		// Exponential backoff without jitter: each retry waits the coefficient times the previous
		// delay, capped at max_interval; the job is not handed out before its delay is over.
		j := e.enqueue(`{"type":"flaky.op","args":[],"options":{"queue":"retry","retry":{"max_attempts":4,
			"initial_interval":"PT0.1S","backoff_coefficient":2,"max_interval":"PT0.3S","jitter":false}}}`)
		id := j["id"].(string)
		var delays []float64
		for attempt := 1; attempt <= 4; attempt++ {
			var got map[string]any
			if attempt == 1 {
				got = e.fetch(1, "retry")[0]
			} else {
				got, _ = e.fetchWhenDue("retry")
			}
			if got["id"] != id || got["attempt"] != float64(attempt) {
				t.Fatalf("attempt %d: %v", attempt, got)
			}
			failedAt := time.Now()
			n := e.nack(id, "Transient")
			if attempt == 4 {
				if n["state"] != "discarded" {
					t.Fatalf("the last attempt's failure: %v", n)
				}
				break
			}
			if n["state"] != "retryable" || n["job_id"] != id || n["attempt"] != float64(attempt) || n["max_attempts"] != 4.0 {
				t.Fatalf("failure of attempt %d: %v", attempt, n)
			}
			if next, _ := n["next_attempt_at"].(string); !rfc3339UTC.MatchString(next) {
				t.Fatalf("next_attempt_at %v", n["next_attempt_at"])
			}
			d, _ := n["retry_delay_ms"].(float64)
			delays = append(delays, d)
			if info := e.info(id); info["state"] != "retryable" && time.Since(failedAt) < time.Duration(d)*time.Millisecond {
				t.Fatalf("the job is %v before its retry delay is over", info["state"])
			}
		}
		if fmt.Sprint(delays) != "[100 200 300]" {
			t.Fatalf("retry delays %v ms, want [100 200 300] (initial 100 ms, coefficient 2, capped at 300 ms)", delays)
		}

		// The dead letter queue lists the discarded job; retry puts it back, delete removes it.
		dl := e.must(200, "GET", "/ojs/v1/dead-letter", nil)
		if !strings.Contains(string(dl.raw), id) {
			t.Fatalf("the discarded job is not in the dead letter queue: %s", dl.raw)
		}
		e.must(200, "POST", "/ojs/v1/dead-letter/"+id+"/retry", nil)
		if s := e.info(id)["state"]; s != "available" {
			t.Fatalf("after a dead letter retry the job is %v", s)
		}
		if dl := e.must(200, "GET", "/ojs/v1/dead-letter", nil); strings.Contains(string(dl.raw), id) {
			t.Fatalf("a retried job is still in the dead letter queue: %s", dl.raw)
		}
		if got := e.fetch(1, "retry"); len(got) != 1 || got[0]["id"] != id {
			t.Fatalf("the retried job was not handed out: %v", ids(got))
		}
		e.ack(id, "null")

		// A non-retryable error type discards the job at once, attempts left or not.
		nr := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"nr","retry":{"max_attempts":5,"non_retryable_errors":["Invalid"]}}}`)
		nrID := nr["id"].(string)
		e.fetch(1, "nr")
		if n := e.nack(nrID, "Invalid"); n["state"] != "discarded" {
			t.Fatalf("non-retryable error: %v", n)
		}
		e.must(200, "DELETE", "/ojs/v1/dead-letter/"+nrID, nil)
		if dl := e.must(200, "GET", "/ojs/v1/dead-letter", nil); strings.Contains(string(dl.raw), nrID) {
			t.Fatalf("a deleted dead letter job is still listed: %s", dl.raw)
		}
		checkErrorBody(t, e.do("DELETE", "/ojs/v1/dead-letter/"+nrID, nil), 404, CodeNotFound)

		// Heartbeat: the worker's active job is extended and the worker told to keep running.
		hb := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"hb"}}`)
		e.fetch(1, "hb")
		r := e.must(200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w-ojs","active_jobs":["`+hb["id"].(string)+`"]}`)
		if r.body["state"] != "running" || !strings.Contains(string(r.raw), hb["id"].(string)) {
			t.Fatalf("heartbeat: %s", r.raw)
		}
		e.ack(hb["id"].(string), "null")

		// Visibility timeout: a fetched job neither acked nor failed is handed out again, as a new
		// attempt, once its reservation lapses.
		vt := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"vt","visibility_timeout_ms":300}}`)
		if got := e.fetch(1, "vt"); len(got) != 1 {
			t.Fatal("the job was not handed out")
		}
		again, _ := e.fetchWhenDue("vt")
		if again["id"] != vt["id"] || again["attempt"] != 2.0 {
			t.Fatalf("after the visibility timeout: %v", again)
		}
		e.ack(vt["id"].(string), "null")

		// Cancel: available, scheduled and retryable jobs are cancelled and never handed out;
		// cancelling a terminal job is a conflict, an unknown one not found.
		av := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"cancel"}}`)
		sc := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"cancel","scheduled_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}}`)
		rt := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"cancel-rt","retry":{"max_attempts":3,"initial_interval":"PT1H"}}}`)
		e.fetch(1, "cancel-rt")
		e.nack(rt["id"].(string), "Transient")
		for _, c := range []map[string]any{av, sc, rt} {
			r := e.must(200, "DELETE", "/ojs/v1/jobs/"+c["id"].(string), nil)
			if jobOf(t, r)["state"] != "cancelled" {
				t.Fatalf("cancel: %s", r.raw)
			}
			if e.info(c["id"].(string))["state"] != "cancelled" {
				t.Fatal("INFO does not show the job cancelled")
			}
			checkErrorBody(t, e.do("DELETE", "/ojs/v1/jobs/"+c["id"].(string), nil), 409, CodeConflict)
		}
		if got := e.fetch(10, "cancel", "cancel-rt"); len(got) != 0 {
			t.Fatalf("cancelled jobs were handed out: %v", ids(got))
		}
		checkErrorBody(t, e.do("DELETE", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000002", nil), 404, CodeNotFound)
	})
}

// Level 2: delayed jobs, expiration, cron.
func TestOJSLevel2Scheduled(t *testing.T) {
	forEachOJSStore(t, func(e *ojsEnv) {
		t := e.t
		// A job scheduled in the future is "scheduled", not handed out before its time, then handed out.
		at := time.Now().Add(700 * time.Millisecond).UTC()
		j := e.enqueue(`{"type":"remind.user","args":[],"options":{"queue":"later","scheduled_at":"` + at.Format(time.RFC3339Nano) + `"}}`)
		if j["state"] != "scheduled" {
			t.Fatalf("a future job is %v", j["state"])
		}
		got, handedOut := e.fetchWhenDue("later")
		if got["id"] != j["id"] {
			t.Fatalf("fetched %v", got["id"])
		}
		if handedOut.Before(at) {
			t.Fatalf("the job was handed out at %v, before its scheduled_at %v", handedOut, at)
		}
		e.ack(got["id"].(string), "null")

		// A job scheduled in the past is available at once.
		past := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"past","scheduled_at":"2020-01-01T00:00:00Z"}}`)
		if past["state"] != "available" || len(e.fetch(1, "past")) != 1 {
			t.Fatalf("a job scheduled in the past: %v", past)
		}

		// A job whose expires_at passes before it could run is discarded without running.
		exp := e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"expiring",
			"scheduled_at":"` + time.Now().Add(600*time.Millisecond).UTC().Format(time.RFC3339Nano) + `",
			"expires_at":"` + time.Now().Add(300*time.Millisecond).UTC().Format(time.RFC3339Nano) + `"}}`)
		deadline := time.Now().Add(ojsWait)
		for e.info(exp["id"].(string))["state"] != "discarded" {
			if got := e.fetch(1, "expiring"); len(got) != 0 {
				t.Fatalf("an expired job was handed out: %v", got[0])
			}
			if time.Now().After(deadline) {
				t.Fatalf("the expired job stayed %v", e.info(exp["id"].(string))["state"])
			}
			time.Sleep(20 * time.Millisecond)
		}

		// Cron: register, list, get, fire (a one-second schedule), unregister.
		r := e.must(201, "POST", "/ojs/v1/cron", `{"name":"tick","expression":"@every 1s","timezone":"Europe/London",
			"job_template":{"type":"tick.tock","args":[7],"options":{"queue":"ticks"}}}`)
		if c, _ := r.body["cron"].(map[string]any); c == nil || c["next_run_at"] == nil {
			t.Fatalf("register: %s", r.raw)
		}
		checkErrorBody(t, e.do("POST", "/ojs/v1/cron", `{"name":"tick","expression":"@every 1s","job_template":{"type":"tick.tock","args":[]}}`), 409, CodeDuplicate)
		if l := e.must(200, "GET", "/ojs/v1/cron", nil); !strings.Contains(string(l.raw), `"tick"`) {
			t.Fatalf("list: %s", l.raw)
		}
		e.must(200, "GET", "/ojs/v1/cron/tick", nil)
		fired, _ := e.fetchWhenDue("ticks")
		if a, _ := json.Marshal(fired["args"]); fired["type"] != "tick.tock" || string(a) != "[7]" {
			t.Fatalf("the cron job: %v", fired)
		}
		e.must(200, "DELETE", "/ojs/v1/cron/tick", nil)
		checkErrorBody(t, e.do("GET", "/ojs/v1/cron/tick", nil), 404, CodeNotFound)
		checkErrorBody(t, e.do("POST", "/ojs/v1/cron", `{"name":"bad","expression":"not cron","job_template":{"type":"a.b","args":[]}}`), 400, CodeInvalidRequest)
		checkErrorBody(t, e.do("POST", "/ojs/v1/cron", `{"name":"bad","expression":"0 9 * * *","timezone":"Mars/Olympus","job_template":{"type":"a.b","args":[]}}`), 400, CodeInvalidRequest)
	})
}

// Level 3: chain, group and batch workflows, with data passing and failure handling.
func TestOJSLevel3Workflows(t *testing.T) {
	forEachOJSStore(t, func(e *ojsEnv) {
		t := e.t
		workflow := func(id string) map[string]any {
			t.Helper()
			r := e.must(200, "GET", "/ojs/v1/workflows/"+id, nil)
			wf, _ := r.body["workflow"].(map[string]any)
			if wf == nil {
				t.Fatalf("no workflow object: %s", r.raw)
			}
			return wf
		}
		create := func(body string) string {
			t.Helper()
			r := e.must(201, "POST", "/ojs/v1/workflows", body)
			wf, _ := r.body["workflow"].(map[string]any)
			if wf == nil || wf["state"] != "running" {
				t.Fatalf("create: %s", r.raw)
			}
			return wf["id"].(string)
		}

		// Chain: one step at a time, in order, each receiving the previous results.
		chain := create(`{"type":"chain","name":"etl","options":{"queue":"chain"},"steps":[
			{"type":"etl.extract","args":[1]},{"type":"etl.transform","args":[2]},{"type":"etl.load","args":[3]}]}`)
		for i, step := range []string{"etl.extract", "etl.transform", "etl.load"} {
			got := e.fetch(10, "chain")
			if len(got) != 1 || got[0]["type"] != step {
				t.Fatalf("chain step %d: fetched %v", i, got)
			}
			if i > 0 {
				if pr, _ := json.Marshal(got[0]["parent_results"]); string(pr) != fmt.Sprintf(`[{"step":%d}]`, i-1) {
					t.Fatalf("chain step %d got parent results %s", i, pr)
				}
			}
			e.ack(got[0]["id"].(string), fmt.Sprintf(`{"step":%d}`, i))
		}
		if wf := workflow(chain); wf["state"] != "completed" {
			t.Fatalf("chain after its last step: %v", wf)
		}

		// A chain halts at a step that fails for good: the workflow fails, later steps never run.
		halted := create(`{"type":"chain","options":{"queue":"halt"},"steps":[
			{"type":"s.one","args":[],"options":{"retry":{"max_attempts":1}}},{"type":"s.two","args":[]}]}`)
		first := e.fetch(10, "halt")
		if len(first) != 1 {
			t.Fatalf("halting chain: fetched %d jobs", len(first))
		}
		e.nack(first[0]["id"].(string), "Fatal")
		if wf := workflow(halted); wf["state"] != "failed" {
			t.Fatalf("a chain whose step failed is %v", wf["state"])
		}
		if got := e.fetch(10, "halt"); len(got) != 0 {
			t.Fatalf("a step after the failed one ran: %v", got)
		}

		// Group: every job at once; the workflow completes when all are terminal.
		group := create(`{"type":"group","jobs":[{"type":"img.resize","args":[1],"options":{"queue":"group"}},
			{"type":"img.resize","args":[2],"options":{"queue":"group"}},{"type":"img.resize","args":[3],"options":{"queue":"group"}}]}`)
		all := e.fetch(10, "group")
		if len(all) != 3 {
			t.Fatalf("group: %d of 3 jobs available at once", len(all))
		}
		for i, j := range all {
			if wf := workflow(group); wf["state"] != "running" {
				t.Fatalf("group with %d of 3 done is %v", i, wf["state"])
			}
			e.ack(j["id"].(string), "null")
		}
		if wf := workflow(group); wf["state"] != "completed" {
			t.Fatalf("group after all its jobs: %v", wf)
		}

		// Batch: on_success and on_complete fire when all succeed, on_failure does not.
		create(`{"type":"batch","jobs":[{"type":"imp.row","args":[1],"options":{"queue":"batch"}},
			{"type":"imp.row","args":[2],"options":{"queue":"batch"}}],
			"callbacks":{"on_success":{"type":"imp.ok","args":[],"options":{"queue":"cb-ok"}},
				"on_failure":{"type":"imp.failed","args":[],"options":{"queue":"cb-failed"}},
				"on_complete":{"type":"imp.done","args":[],"options":{"queue":"cb-done"}}}}`)
		if len(e.fetch(10, "cb-ok", "cb-failed", "cb-done")) != 0 {
			t.Fatal("a callback ran before the batch's jobs")
		}
		for _, j := range e.fetch(10, "batch") {
			e.ack(j["id"].(string), `"row"`)
		}
		if len(e.fetch(10, "cb-ok")) != 1 || len(e.fetch(10, "cb-done")) != 1 || len(e.fetch(10, "cb-failed")) != 0 {
			t.Fatal("callbacks of a batch that succeeded: want on_success and on_complete only")
		}

		// Batch with a failure: on_failure and on_complete, not on_success.
		bad := create(`{"type":"batch","jobs":[{"type":"imp.row","args":[1],"options":{"queue":"batch2"}},
			{"type":"imp.row","args":[2],"options":{"queue":"batch2","retry":{"max_attempts":1}}}],
			"callbacks":{"on_success":{"type":"imp.ok","args":[],"options":{"queue":"cb2-ok"}},
				"on_failure":{"type":"imp.failed","args":[],"options":{"queue":"cb2-failed"}},
				"on_complete":{"type":"imp.done","args":[],"options":{"queue":"cb2-done"}}}}`)
		for _, j := range e.fetch(10, "batch2") {
			if a, _ := json.Marshal(j["args"]); string(a) == "[2]" {
				e.nack(j["id"].(string), "Fatal")
			} else {
				e.ack(j["id"].(string), "null")
			}
		}
		cbs := append(e.fetch(10, "cb2-failed"), e.fetch(10, "cb2-done")...)
		if len(cbs) != 2 || len(e.fetch(10, "cb2-ok")) != 0 {
			t.Fatal("callbacks of a batch with a failure: want on_failure and on_complete only")
		}
		// It stays running until its callbacks end (ojs-workflows.md 9.4, 9.5).
		if wf := workflow(bad); wf["state"] != "running" {
			t.Fatalf("a batch with a failed job whose callbacks run is %v", wf["state"])
		}
		for _, j := range cbs {
			e.ack(j["id"].(string), "null")
		}
		if wf := workflow(bad); wf["state"] != "failed" {
			t.Fatalf("a batch with a failed job is %v", wf["state"])
		}

		// Cancelling a running workflow cancels its jobs; unknown workflows are not found.
		cancel := create(`{"type":"group","jobs":[{"type":"g.a","args":[],"options":{"queue":"gc"}}]}`)
		e.must(200, "DELETE", "/ojs/v1/workflows/"+cancel, nil)
		if len(e.fetch(10, "gc")) != 0 {
			t.Fatal("a job of a cancelled workflow was handed out")
		}
		checkErrorBody(t, e.do("GET", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000003", nil), 404, CodeNotFound)
		checkErrorBody(t, e.do("POST", "/ojs/v1/workflows", `{"type":"chain","steps":[]}`), 400, "")
	})
}

// Level 4: priorities, unique jobs, batch enqueue, queue pause/resume and statistics.
func TestOJSLevel4Advanced(t *testing.T) {
	forEachOJSStore(t, func(e *ojsEnv) {
		t := e.t
		// Priority: higher numbers first within a queue, then oldest first.
		for _, p := range []int{1, 3, 2, 3, 1} {
			e.enqueue(fmt.Sprintf(`{"type":"p.job","args":[%d],"options":{"queue":"prio","priority":%d}}`, p, p))
		}
		var order []string
		for _, j := range e.fetch(5, "prio") {
			a, _ := json.Marshal(j["args"])
			order = append(order, string(a))
		}
		if strings.Join(order, "") != "[3][3][2][1][1]" {
			t.Fatalf("priority order %v", order)
		}

		// Unique jobs: a duplicate is refused (409) while the first is live; another key is not.
		u := `{"type":"mail.welcome","args":[%d],"options":{"queue":"uniq"},"unique":{"keys":["type","args"],"on_conflict":"reject"}}`
		first := e.enqueue(fmt.Sprintf(u, 1))
		dup := e.do("POST", "/ojs/v1/jobs", fmt.Sprintf(u, 1))
		checkErrorBody(t, dup, 409, CodeDuplicate)
		if !strings.Contains(string(dup.raw), first["id"].(string)) {
			t.Fatalf("the conflict does not name the existing job: %s", dup.raw)
		}
		e.enqueue(fmt.Sprintf(u, 2))

		// Batch enqueue: 1000 jobs in one request; a batch with one invalid job stores nothing.
		var b strings.Builder
		b.WriteString(`{"jobs":[`)
		for i := range 1000 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"type":"bulk.item","args":[%d],"options":{"queue":"bulk"}}`, i)
		}
		b.WriteString(`]}`)
		r := e.must(201, "POST", "/ojs/v1/jobs/batch", b.String())
		if jobs, _ := r.body["jobs"].([]any); len(jobs) != 1000 || r.body["count"] != 1000.0 {
			t.Fatalf("batch of 1000: count %v, %d jobs", r.body["count"], len(jobs))
		}
		r = e.do("POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"bulk.ok","args":[],"options":{"queue":"bulk-bad"}},{"args":[],"options":{"queue":"bulk-bad"}}]}`)
		checkErrorBody(t, r, 400, "")
		if len(e.fetch(10, "bulk-bad")) != 0 {
			t.Fatal("a refused batch stored jobs")
		}

		// Pause: enqueue still works, nothing is handed out; resume hands it out again.
		e.must(200, "POST", "/ojs/v1/queues/pq/pause", nil)
		e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"pq"}}`)
		if len(e.fetch(10, "pq")) != 0 {
			t.Fatal("a paused queue handed out a job")
		}
		st := e.must(200, "GET", "/ojs/v1/queues/pq/stats", nil)
		if !strings.Contains(string(st.raw), `"paused":true`) {
			t.Fatalf("stats of a paused queue do not say so: %s", st.raw)
		}
		e.must(200, "POST", "/ojs/v1/queues/pq/resume", nil)
		if len(e.fetch(10, "pq")) != 1 {
			t.Fatal("a resumed queue did not hand out its job")
		}

		// Statistics: counts per state.
		for range 3 {
			e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"stats","retry":{"max_attempts":1}}}`)
		}
		got := e.fetch(2, "stats")
		e.ack(got[0]["id"].(string), "null")
		e.nack(got[1]["id"].(string), "Fatal")
		e.enqueue(`{"type":"a.b","args":[],"options":{"queue":"stats"}}`)
		e.fetch(1, "stats")
		st = e.must(200, "GET", "/ojs/v1/queues/stats/stats", nil)
		// pronto answers {"queue": {name, status, counts per state}} (docs/http-api.md).
		var stats struct {
			Queue struct {
				Name      string `json:"name"`
				Status    string `json:"status"`
				Available int    `json:"available"`
				Active    int    `json:"active"`
				Completed int    `json:"completed"`
				Discarded int    `json:"discarded"`
				Total     int    `json:"total"`
			} `json:"queue"`
		}
		if err := json.Unmarshal(st.raw, &stats); err != nil {
			t.Fatal(err)
		}
		q := stats.Queue
		if q.Name != "stats" || q.Status != "active" || q.Available != 1 || q.Active != 1 ||
			q.Completed != 1 || q.Discarded != 1 || q.Total != 4 {
			t.Fatalf("stats: %s", st.raw)
		}
	})
}
