package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// These tests send what the official OJS Ruby SDK (openjobspec/ojs-ruby-sdk), Rust SDK
// (openjobspec/ojs-rust-sdk) and Java SDK (openjobspec/ojs-java-sdk) send, with their headers, and
// read the answers the way those SDKs read them (Rust: serde into typed structs, whose Go mirror here
// is encoding/json into the same field types).

// rubyCall is lib/ojs/transport/http.rb HTTP#request: Content-Type and Accept
// application/openjobspec+json, OJS-Version "1.0.0-rc.1" (lib/ojs/version.rb SPEC_VERSION);
// handle_response accepts 200 and 201 only.
func rubyCall(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	return wireCall(t, h, "1.0.0-rc.1", method, path, body)
}

// TestRubySDKEnqueueSpecversion: ojs-ruby-sdk lib/ojs/client.rb Client#enqueue posts Job#to_hash
// (lib/ojs/job.rb), which always carries "specversion" => OJS::SPEC_VERSION, i.e. "1.0.0-rc.1"
// (lib/ojs/version.rb), a client-generated UUIDv7 id, the queue at the top level and the args wrapped
// in an array. Client#enqueue_batch posts the same envelopes under "jobs". ojs-core §5.1 spells the
// value "1.0" but also requires a SemVer string: any 1.0.x (pre)release is taken as OJS 1.0, and
// other versions are refused naming the field.
func TestRubySDKEnqueueSpecversion(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	// client.enqueue("email.send", { to: "a@example.com" }, queue: "mail", priority: 2)
	one := `{"specversion":"1.0.0-rc.1","id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","type":"email.send","queue":"mail","args":[{"to":"a@example.com"}],"priority":2}`
	if rec := rubyCall(t, s, "POST", "/ojs/v1/jobs", one); rec.Code != 201 {
		t.Errorf("Ruby SDK Client#enqueue: status %d, want 201 (the SDK raises on anything but 200/201): %s", rec.Code, rec.Body.Bytes())
	}
	// client.enqueue_batch([{ type: "email.send", args: { to: "b@example.com" } }])
	batch := `{"jobs":[{"specversion":"1.0.0-rc.1","id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e10","type":"email.send","queue":"default","args":[{"to":"b@example.com"}]}]}`
	if rec := rubyCall(t, s, "POST", "/ojs/v1/jobs/batch", batch); rec.Code != 201 {
		t.Errorf("Ruby SDK Client#enqueue_batch: status %d, want 201: %s", rec.Code, rec.Body.Bytes())
	}

	for _, v := range []string{"1.0", "1.0.0", "1.0.7", "1.0.0-rc.1", "1.0.0-alpha-2.x", "1.0.1+build.07", "1.0.0-rc.1+sha.5114f85"} {
		if r := call(t, s, "POST", "/ojs/v1/jobs", `{"specversion":"`+v+`","type":"a.b","args":[]}`); r.status != 201 {
			t.Errorf("specversion %q: status %d, want 201: %s", v, r.status, r.raw)
		}
	}
	for _, v := range []string{"", "1", "1.1", "2.0", "1.1.0", "0.9.0", "1.0.", "1.0.01", "1.0.x", "1.0.0-", "1.0.0-rc..1",
		"1.0.0-01", "1.0.0+", "1.0.0-rc!", "v1.0.0", "1.0.0.0"} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"specversion":"`+v+`","type":"a.b","args":[]}`)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "specversion") {
			t.Errorf("specversion %q refused without naming it: %s", v, r.raw)
		}
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"specversion":1.0,"type":"a.b","args":[]}`), 400, CodeInvalidRequest)
}

// rustPanicArgs is a Go job type whose worker panics.
type rustPanicArgs struct{}

func (rustPanicArgs) Kind() string { return "wire.panic" }

// rustJobError mirrors ojs-rust-sdk src/errors.rs JobError: type and message required, backtrace
// Option<Vec<String>> (serde fails on a JSON string there, as encoding/json does).
type rustJobError struct {
	Type      *string   `json:"type"`
	Message   *string   `json:"message"`
	Backtrace *[]string `json:"backtrace,omitempty"`
}

// rustJob is the part of ojs-rust-sdk src/job.rs Job that matters here.
type rustJob struct {
	ID     string         `json:"id"`
	Type   string         `json:"type"`
	State  *string        `json:"state"`
	Error  *rustJobError  `json:"error"`
	Errors []rustJobError `json:"errors"`
}

// TestRustSDKBacktraceIsArray: a job whose attempt panicked in a Go worker (the documented interop:
// Go workers on the client `pronto serve` uses, see TestGoWorkerInterop) is shown with its trace as
// "backtrace", an array of frame strings (ojs-core.md §8.1: `"backtrace": [string]`), as ojs-rust-sdk
// decodes it: Option<Vec<String>> (src/errors.rs JobError) inside every Job it reads, so a string
// there fails Client::list_dead_letter_jobs (src/client/mod.rs: GET
// /dead-letter?queue=&limit=&offset= into DeadLetterResponse{jobs: Vec<Job>}, src/queue.rs) for the
// whole page, and the Rust worker's fetch (src/worker/mod.rs fetch_jobs) of such a job being retried.
func TestRustSDKBacktraceIsArray(t *testing.T) {
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[rustPanicArgs]) error {
		panic("wire test: worker exploded")
	}))
	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:       map[string]pronto.QueueConfig{"gopanic": {MaxWorkers: 1}},
		Workers:      workers,
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})

	// The job comes over HTTP (Rust SDK EnqueueRequest: type, args, options), one attempt only.
	rec := wireCall(t, s, "1.0", "POST", "/ojs/v1/jobs",
		`{"type":"wire.panic","args":[{}],"options":{"queue":"gopanic","retry":{"max_attempts":1,"initial_interval":"PT1S","backoff_coefficient":2.0,"max_interval":"PT5M","jitter":true,"non_retryable_errors":[],"on_exhaustion":"dead_letter"}}}`)
	if rec.Code != 201 {
		t.Fatalf("enqueue: %d %s", rec.Code, rec.Body.Bytes())
	}
	var enq struct {
		Job rustJob `json:"job"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &enq); err != nil {
		t.Fatal(err)
	}
	var trace string
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := client.JobGet(context.Background(), enq.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == pronto.StateDiscarded {
			if len(j.Errors) == 0 || j.Errors[0].Trace == "" {
				t.Fatalf("the panic left no trace: %+v", j.Errors)
			}
			trace = j.Errors[0].Trace
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Go worker never failed the job: %s", j.State)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Client::list_dead_letter_jobs("gopanic", 10, 0)
	rec = wireCall(t, s, "1.0", "GET", "/ojs/v1/dead-letter?queue=gopanic&limit=10&offset=0", "")
	if rec.Code != 200 {
		t.Fatalf("dead-letter: %d %s", rec.Code, rec.Body.Bytes())
	}
	var page struct {
		Jobs []rustJob `json:"jobs"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatalf("Rust SDK list_dead_letter_jobs cannot decode the page (error.backtrace must be an array of strings, OJS core §8.1): %v\n%.600s", err, rec.Body.Bytes())
	}
	if len(page.Jobs) != 1 || page.Jobs[0].Error == nil || page.Jobs[0].Error.Backtrace == nil || len(*page.Jobs[0].Error.Backtrace) == 0 {
		t.Fatalf("dead-letter job without its backtrace frames: %s", rec.Body.Bytes())
	}
	frames := *page.Jobs[0].Error.Backtrace
	if first := strings.TrimSpace(strings.SplitN(trace, "\n", 2)[0]); frames[0] != first {
		t.Errorf("first frame %q, want the trace's first line %q", frames[0], first)
	}
	for _, f := range frames {
		if f == "" || strings.ContainsAny(f, "\n\t") {
			t.Errorf("frame %q: one trimmed, non-empty line each", f)
		}
	}
	if len(page.Jobs[0].Errors) != 1 || page.Jobs[0].Errors[0].Backtrace == nil {
		t.Errorf("the error history's entry without its frames: %s", rec.Body.Bytes())
	}
}

// TestBacktraceFrames: a trace text becomes at most 50 non-blank lines of at most 10,000
// characters in all (ojs-core §8.1's recommendation); a worker's backtrace sent as an array is shown
// as sent, one sent as a text is split the same way, and one of another kind is left out.
func TestBacktraceFrames(t *testing.T) {
	got := backtraceFrames("panic: boom\n\ngoroutine 1 [running]:\r\n\tmain.f()\n\t\t/src/main.go:12 +0x1d\n  \n")
	want := []string{"panic: boom", "goroutine 1 [running]:", "main.f()", "/src/main.go:12 +0x1d"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames %q, want %q", got, want)
	}
	if got := backtraceFrames(""); got == nil || len(got) != 0 {
		t.Errorf("an empty trace: %#v, want an empty array", got)
	}
	if got := backtraceFrames(strings.Repeat("frame\n", 80)); len(got) != maxBacktraceFrames {
		t.Errorf("%d frames of 80 lines, want %d", len(got), maxBacktraceFrames)
	}
	long := backtraceFrames(strings.Repeat(strings.Repeat("é", 3000)+"\n", 5))
	total := 0
	for _, f := range long {
		total += len([]rune(f))
	}
	if total != maxBacktraceChars || len(long) != 4 || len([]rune(long[3])) != 1000 {
		t.Errorf("4 lines of 3000 characters: %d frames of %d characters in all, want 4 (the last cut) of %d", len(long), total, maxBacktraceChars)
	}

	for _, tc := range []struct{ sent, want string }{
		{`["at a.rb:1","at b.rb:2"]`, `["at a.rb:1","at b.rb:2"]`},
		{`"at a.rb:1\n  at b.rb:2\n"`, `["at a.rb:1","at b.rb:2"]`},
		{`{"frames":1}`, ``},
		{`null`, ``},
	} {
		ae := &pronto.AttemptError{Message: "m", Details: json.RawMessage(`{"code":"c","message":"m","backtrace":` + tc.sent + `}`)}
		var view map[string]json.RawMessage
		if err := json.Unmarshal(appendAttemptError(nil, ae), &view); err != nil {
			t.Fatal(err)
		}
		if got := string(view["backtrace"]); got != tc.want {
			t.Errorf("sent backtrace %s: shown %s, want %s", tc.sent, got, tc.want)
		}
	}
}

// TestRubySDKHeartbeat, on every store: ojs-ruby-sdk lib/ojs/worker.rb. Worker#fetch_jobs posts
// {"queues": [...], "batch_size": n} with no worker_id (worker_id is optional on fetch, ojs-http-binding
// §10.1, and the job is then held by worker ""), and Worker#send_heartbeat (its heartbeat loop, and
// JobContext#heartbeat) posts only {"job_ids": [ids]}: no worker_id, and the ids under "job_ids".
// The SDK is off the binding here (§10.4: worker_id required, ids in active_jobs), but the jobs were
// claimed with no worker id, so a heartbeat with none matches them, and "job_ids" is one more name of
// the ids. Who may extend what does not widen: a heartbeat without a worker id extends no job held by
// a named worker, a named worker none held by worker "", and without a worker id a count alone is
// refused (it cannot tell one anonymous worker's jobs from another's).
func TestRubySDKHeartbeat(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			for range 2 {
				if rec := rubyCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"r.b","args":[{}],"queue":"rq","options":{"visibility_timeout_ms":60000}}`); rec.Code != 201 {
					t.Fatalf("enqueue: %d %s", rec.Code, rec.Body.Bytes())
				}
			}
			rec := rubyCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["rq"],"batch_size":1}`)
			var fetched struct {
				Jobs []struct {
					ID string `json:"id"`
				} `json:"jobs"`
			}
			if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &fetched) != nil || len(fetched.Jobs) != 1 {
				t.Fatalf("fetch: %d %s", rec.Code, rec.Body.Bytes())
			}
			anon := fetched.Jobs[0].ID
			named := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["rq"],"worker_id":"w1"}`).body["jobs"].([]any)[0].(map[string]any)["id"].(string)

			type beat struct {
				JobsExtended []string `json:"jobs_extended"`
				JobsLost     []string `json:"jobs_lost"`
			}
			heartbeat := func(body string) beat {
				t.Helper()
				rec := rubyCall(t, s, "POST", "/ojs/v1/workers/heartbeat", body)
				var hb beat
				if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &hb) != nil {
					t.Fatalf("heartbeat %s: status %d, want 200: %s", body, rec.Code, rec.Body.Bytes())
				}
				return hb
			}
			// Worker#send_heartbeat
			if hb := heartbeat(`{"job_ids":["` + anon + `"]}`); len(hb.JobsExtended) != 1 || hb.JobsExtended[0] != anon || len(hb.JobsLost) != 0 {
				t.Fatalf("the heartbeat did not extend the job the Ruby worker holds: %+v", hb)
			}
			if hb := heartbeat(`{"job_ids":[]}`); len(hb.JobsExtended) != 0 || len(hb.JobsLost) != 0 {
				t.Fatalf("a heartbeat of no jobs: %+v", hb)
			}
			if hb := heartbeat(`{"job_ids":["` + named + `"]}`); len(hb.JobsExtended) != 0 || len(hb.JobsLost) != 1 {
				t.Fatalf("a heartbeat without a worker id extended a job held by w1: %+v", hb)
			}
			if hb := heartbeat(`{"worker_id":"w1","job_ids":["` + anon + `"],"active_job_ids":["` + named + `"]}`); len(hb.JobsExtended) != 1 || hb.JobsExtended[0] != named || len(hb.JobsLost) != 1 || hb.JobsLost[0] != anon {
				t.Fatalf("w1 extended a job held by worker \"\", or not its own: %+v", hb)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"active_jobs":1}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"","active_jobs":1}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"job_ids":"`+anon+`"}`), 400, CodeInvalidRequest)
		})
	}
}

// TestRubySDKFetchBatchSize: ojs-ruby-sdk lib/ojs/worker.rb Worker#fetch_jobs asks for min(free
// slots, DEFAULT_BATCH_SIZE=5) jobs as "batch_size" (the binding's field is "count", §10.1), and the
// Ruby poll loop sleeps poll_interval (2 s) after every fetch whatever it got: read as count, with
// count's bounds, and count wins when both are sent.
func TestRubySDKFetchBatchSize(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for range 5 {
		if rec := wireCall(t, s, "1.0", "POST", "/ojs/v1/jobs", `{"type":"r.b","args":[{}],"options":{"queue":"rb"}}`); rec.Code != 201 {
			t.Fatalf("enqueue: %d %s", rec.Code, rec.Body.Bytes())
		}
	}
	fetch := func(body string) int {
		t.Helper()
		rec := rubyCall(t, s, "POST", "/ojs/v1/workers/fetch", body)
		var fetched struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &fetched) != nil {
			t.Fatalf("fetch %s: %d %s", body, rec.Code, rec.Body.Bytes())
		}
		return len(fetched.Jobs)
	}
	if n := fetch(`{"queues":["rb"],"batch_size":3}`); n != 3 {
		t.Fatalf("Ruby SDK Worker#fetch_jobs asked for batch_size 3 of 5 available jobs, got %d", n)
	}
	if n := fetch(`{"queues":["rb"],"count":1,"batch_size":5}`); n != 1 {
		t.Fatalf("count 1 beside batch_size 5: got %d jobs, want 1", n)
	}
	for _, body := range []string{`{"queues":["rb"],"batch_size":0}`, `{"queues":["rb"],"batch_size":1001}`, `{"queues":["rb"],"batch_size":"2"}`} {
		r := call(t, s, "POST", "/ojs/v1/workers/fetch", body)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "batch_size") {
			t.Errorf("%s refused without naming batch_size: %s", body, r.raw)
		}
	}
}

// TestJavaSDKManifestDotSegments: ojs-java-sdk asks for the manifest at /ojs/v1/../manifest. Under
// `pronto serve`'s http.ServeMux that path was answered with a redirect to /ojs/manifest, which the
// Java client does not follow; the server NewHTTPServer returns serves a GET or HEAD the cleaned
// path directly (what the redirect named, through the same handlers), and leaves other methods and
// escaped paths to the mux.
func TestJavaSDKManifestDotSegments(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	mux := http.NewServeMux() // as internal/cli serve mounts the API
	mux.Handle("/ojs/", s)
	mux.Handle("/", http.NotFoundHandler())
	h := NewHTTPServer("127.0.0.1:0", mux).Handler

	rec := wireCall(t, h, "1.0", "GET", "/ojs/v1/../manifest", "")
	var m struct {
		OJSVersion string `json:"ojs_version"`
	}
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &m) != nil || m.OJSVersion == "" {
		t.Fatalf("GET /ojs/v1/../manifest: %d %s", rec.Code, rec.Body.Bytes())
	}
	if rec := wireCall(t, h, "", "HEAD", "/ojs/v1/./health", ""); rec.Code != 200 {
		t.Errorf("HEAD /ojs/v1/./health: %d, want 200", rec.Code)
	}
	if rec := wireCall(t, h, "1.0", "GET", "/ojs/v1/queues/../../manifest?x=1", ""); rec.Code != 200 {
		t.Errorf("GET with a query: %d, want 200", rec.Code)
	}
	if rec := wireCall(t, h, "1.0", "GET", "/ojs/v1/../../../etc/passwd", ""); rec.Code != 404 {
		t.Errorf("a path cleaned above the root: %d, want 404 (it is /etc/passwd, outside the API)", rec.Code)
	}
	if rec := wireCall(t, h, "1.0", "POST", "/ojs/v1/../v1/jobs", `{"type":"a.b","args":[]}`); rec.Code/100 != 3 {
		t.Errorf("a POST with dot segments: %d, want the mux's redirect", rec.Code)
	}
	if rec := wireCall(t, h, "1.0", "GET", "/ojs/v1/%2e%2e/manifest", ""); rec.Code == 200 {
		t.Errorf("an escaped dot segment was cleaned: %d", rec.Code)
	}
}
