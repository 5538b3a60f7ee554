package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
)

// fuzzSeeds are request bodies that exercise every decoder: valid envelopes, each kind of mistake,
// and the shapes the conformance cases send. `go test` runs them as ordinary cases; `go test
// -fuzz=Fuzz` explores from them.
var fuzzSeeds = []string{
	`{"type":"email.send","args":["user@example.com","welcome"]}`,
	`{"type":"report.generate","args":[42,"quarterly",{"include_charts":true}],"meta":{"trace_id":"t","tags":["a"]},"options":{"queue":"reports","priority":10,"timeout_ms":300000,"delay_until":"2020-01-01T00:00:00Z","retry":{"max_attempts":5,"initial_interval":"PT1S","backoff_coefficient":2,"max_interval":"PT5M","jitter":true,"non_retryable_errors":["ValidationError"]},"unique":{"keys":["type"],"period":"PT1H","on_conflict":"reject"}}}`,
	`{"type":"a.b","args":[],"id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","x_custom":{"nested":true},"specversion":"1.0"}`,
	`{"type":"a.b","args":[],"options":{"scheduled_at":"+PT5S","expires_at":"+PT1H","visibility_timeout_ms":3000,"metadata":{"test_directive":"quiet"}}}`,
	`{"type":"a.b","args":[],"options":{"retry":{"max_attempts":-1}}}`,
	`{"type":"a.b","args":[],"options":{"retry":{"backoff_coefficient":0.5,"backoff_strategy":"linear","on_exhaustion":"dead_letter"}}}`,
	`{"type":"a.b","args":[],"options":{"retry":{"initial_interval":"P1Y","max_interval":"PT0S"}}}`,
	`{"type":"a.b","args":[],"options":{"priority":1e400}}`,
	`{"type":"a.b","args":[],"options":{"priority":-101,"queue":"Bad Queue"}}`,
	`{"type":"Email.Send","args":[]}`,
	`{"type":"a.b","args":{"not":"an array"}}`,
	`{"type":"a.b","args":null,"meta":"x"}`,
	`{"args":["missing type"]}`,
	`{"type":"a.b","args":[],"id":"not-a-uuid"}`,
	`{"type":"a.b","args":[],"meta":{"_pronto":{}}}`,
	`{"type":"a.b","args":[],"options":{"tags":["x",1]}}`,
	`{"type":"a.b","args":[],"options":null,"queue":"top-level","priority":5,"retry":{"max_attempts":0}}`,
	`{ invalid json }`,
	`[]`, `null`, `""`, `0`, ``, `{"type":"\ud800","args":[]}`,
	`{"jobs":[{"type":"a.b","args":[]},{"type":"c.d","args":[1]}]}`,
	`{"jobs":[{"type":"a.b"}]}`,
	`{"queues":["default","b"],"count":5,"worker_id":"w","visibility_timeout_ms":30000}`,
	`{"queues":[],"count":0}`,
	`{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","result":{"ok":true}}`,
	`{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","error":{"code":"handler_error","message":"m","retryable":false,"details":{"error_class":"X"}},"requeue":false}`,
	`{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","requeue":true}`,
	`{"worker_id":"w","active_jobs":["019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","bad"],"visibility_timeout_ms":1}`,
	`{"name":"n","expression":"*/5 * * * *","timezone":"Asia/Tokyo","overlap_policy":"skip","job_template":{"type":"a.b","args":[1],"options":{"queue":"q"}}}`,
	`{"name":"n","expression":"99 25 32 13 8","job_template":{"type":"a.b","args":[]}}`,
	`{"name":"N!","cron":"@every 0s","type":"a.b"}`,
	`{"type":"a.b","args":[{"id":1}],"meta":{"t":"x"},"options":{"unique":{"keys":["type","queue","args","meta"],"args_keys":["id"],"meta_keys":["t"],"period":"PT1H","states":["available","completed"],"on_conflict":"replace_except_schedule"}}}`,
	`{"type":"a.b","args":[],"unique":{"keys":["meta"],"on_conflict":"use_existing","period":"P1W"}}`,
	`{"type":"a.b","args":[],"options":{"rate_limit":{"key":"tenant:acme","concurrency":5,"rate":{"limit":100,"period":"PT1M"},"on_limit":"reschedule"}}}`,
	`{"type":"a.b","args":[],"options":{"rate_limit":{"max_per_second":1}}}`,
	`{"key":"k","concurrency":0,"throttle":{"limit":1,"period":"PT1S"},"expires_at":"2030-01-01T00:00:00Z"}`,
	`{"type":"chain","name":"c","options":{"queue":"q","retry":{"max_attempts":1}},"steps":[{"type":"a.b","args":[1]},{"type":"c.d","args":[],"options":{"retry_policy":{"max_attempts":2}}}]}`,
	`{"type":"batch","jobs":[{"type":"a.b","args":[]}],"callbacks":{"on_success":{"type":"s.t","args":[]},"on_failure":null,"on_complete":{"type":"x","args":{}}}}`,
	`{"type":"dag","steps":[{"name":"a","type":"a.b","args":[]},{"name":"b","type":"a.b","args":[],"depends_on":["a","z"]}]}`,
	`{"type":"pipeline","steps":[],"jobs":[]}`,
	// Input no store can hold (issue 13): refused with 400 at the boundary, on every store.
	unstorableSeedsStart,
	`{"type":"a.b","args":["a\u0000b"]}`,
	"{\"type\":\"a.b\",\"args\":[\"\xff\"]}",
	`{"type":"a.b","args":["\ud800"],"meta":{"k":"\udc00"}}`,
	`{"type":"a.b","args":[1e1000000],"meta":{"n":1e-400}}`,
	`{"type":"a.b","args":[],"meta":{"k\u0000":1},"options":{"tags":["\u0000"],"queue":"q\u0000"}}`,
	`{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[{"x":"\u0000"}]}]}`,
	`{"queues":["default"],"worker_id":"w\u0000"}`,
	`{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","worker_id":"w","result":{"v":"\u0000"}}`,
	`{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","worker_id":"w","error":{"code":"c","message":"m\u0000\ud800","details":{"n":1e1000000}}}`,
	`{"worker_id":"\ud800","active_jobs":[]}`,
	`{"name":"n","expression":"@hourly","description":"\u0000","job_template":{"type":"a.b","args":[1e1000000]}}`,
	`{"type":"chain","name":"c\u0000","steps":[{"type":"a.b","args":["\ud800"]}]}`,
	`{"filter":{"queue":"\u0000"}}`,
}

// unstorableSeedsStart marks where the seeds of input no store can hold start in fuzzSeeds (it is
// itself a valid seed); FuzzHandler sends each of those to every POST and PUT route.
const unstorableSeedsStart = `{"type":"a.b","args":[],"meta":{"ok":"\u00e9"}}`

// FuzzDecode feeds arbitrary bodies to every request decoder: each returns a value or an OJS error
// with a 400 or 422 status, never panics, and never accepts a job the client would refuse.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(what string, e *apiError) {
			if e == nil {
				return
			}
			if e.status != 400 && e.status != 422 {
				t.Fatalf("%s: status %d for %q", what, e.status, body)
			}
			if e.code == "" || e.message == "" {
				t.Fatalf("%s: error without code or message for %q", what, body)
			}
		}
		// The member splitter agrees with encoding/json on every valid object.
		if json.Valid(body) && jsonKind(body) == "object" {
			obj, ok := splitObject(body)
			if !ok {
				t.Fatalf("splitObject refused a valid object: %q", body)
			}
			var want map[string]json.RawMessage
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			got := map[string]json.RawMessage{}
			for _, mb := range obj {
				got[mb.key] = mb.val
			}
			if len(got) != len(want) {
				t.Fatalf("splitObject: %d members, encoding/json %d: %q", len(got), len(want), body)
			}
			for k, v := range want {
				if string(bytes.TrimSpace(got[k])) != string(bytes.TrimSpace(v)) {
					t.Fatalf("splitObject: member %q = %q, encoding/json %q", k, got[k], v)
				}
			}
		}
		req, e := decodeJob(body, now)
		check("job", e)
		if e == nil {
			if !json.Valid(req.job.Args) || req.job.Args[0] != '[' {
				t.Fatalf("accepted args that are not an array: %q", req.job.Args)
			}
			if req.job.Meta != nil && (!json.Valid(req.job.Meta) || jsonKind(req.job.Meta) != "object") {
				t.Fatalf("accepted meta that is not a JSON object: %q", req.job.Meta)
			}
			if !pronto.ValidOJSType(req.job.Kind) || !validQueue(queueOr(req.job.Opts.Queue)) {
				t.Fatalf("accepted type %q, queue %q", req.job.Kind, req.job.Opts.Queue)
			}
			if jsoncheck.Check(req.job.Args, "args") != nil || jsoncheck.Check(req.job.Meta, "meta") != nil || jsoncheck.CheckStrings(req.job.Opts.Tags, "tags") != nil {
				t.Fatalf("accepted a job no store can hold: %q", body)
			}
		}
		_, e = decodeBatch(body, now, 100)
		check("batch", e)
		_, e = decodeFetch(body)
		check("fetch", e)
		_, e = decodeAck(body)
		check("ack", e)
		_, e = decodeNack(body)
		check("nack", e)
		_, e = decodeHeartbeat(body)
		check("heartbeat", e)
		_, e = decodeCron(body, now)
		check("cron", e)
		_, e = decodeRateLimit(body, "", true)
		check("rate limit", e)
		_, wreqs, e := decodeWorkflow(body, now, 100)
		check("workflow", e)
		for _, req := range wreqs {
			if !json.Valid(req.job.Args) || req.job.Args[0] != '[' || req.job.Opts.Unique != nil || req.job.Opts.Pending {
				t.Fatalf("workflow: accepted a job the client would refuse: %+v", req.job)
			}
		}
	})
}

// fuzzRoutes are the endpoints FuzzHandler sends bodies to.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/ojs/v1/jobs"},
	{"POST", "/ojs/v1/jobs/batch"},
	{"POST", "/ojs/v1/workers/fetch"},
	{"POST", "/ojs/v1/workers/ack"},
	{"POST", "/ojs/v1/workers/nack"},
	{"POST", "/ojs/v1/workers/heartbeat"},
	{"POST", "/ojs/v1/cron"},
	{"GET", "/ojs/v1/jobs/"},
	{"DELETE", "/ojs/v1/jobs/"},
	{"GET", "/ojs/v1/events?"},
	{"GET", "/ojs/v1/dead-letter?"},
	{"POST", "/ojs/v1/queues/"},
	{"POST", "/ojs/v1/workflows"},
	{"GET", "/ojs/v1/workflows/"},
	{"DELETE", "/ojs/v1/workflows/"},
	{"PUT", "/ojs/v1/rate-limits/"},
	{"GET", "/ojs/v1/rate-limits/"},
}

// FuzzHandler sends arbitrary bodies and path tails through the whole handler over a memory store:
// no request gets a 5xx or a panic, and every answer is a JSON object, an OJS error body when it is
// an error. FuzzHandlerSQLite, FuzzHandlerPostgres and FuzzHandlerRedis do the same over the other
// stores, so that the seeds (input no store can hold among them) are refused alike on every store.
func FuzzHandler(f *testing.F) {
	s, _ := newTestServer(f, Config{MaxBodyBytes: 64 << 10})
	fuzzHandler(f, s)
}

// FuzzHandlerSQLite is FuzzHandler over a SQLite store.
func FuzzHandlerSQLite(f *testing.F) { fuzzHandler(f, newStoreServer(f, "sqlite")) }

// FuzzHandlerPostgres is FuzzHandler over a PostgreSQL store.
func FuzzHandlerPostgres(f *testing.F) { fuzzHandler(f, newStoreServer(f, "postgres")) }

func fuzzHandler(f *testing.F, s *Server) {
	for i, s := range fuzzSeeds {
		f.Add(uint8(i), []byte(s), "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f")
	}
	f.Add(uint8(7), []byte(nil), "../../etc/passwd")
	f.Add(uint8(9), []byte(nil), "types=job.*&limit=5&after=evt_x")
	f.Add(uint8(10), []byte(nil), "limit=0&cursor=zz")
	f.Add(uint8(11), []byte(nil), "q%2Fx/pause")
	unstorable := false
	for _, s := range fuzzSeeds {
		unstorable = unstorable || s == unstorableSeedsStart
		if !unstorable {
			continue
		}
		for i, rt := range fuzzRoutes {
			if rt.method == "POST" || rt.method == "PUT" {
				f.Add(uint8(i), []byte(s), "k")
			}
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte, tail string) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := rt.path
		if strings.HasSuffix(target, "/") || strings.HasSuffix(target, "?") {
			target += tail
		}
		req, err := newFuzzRequest(rt.method, target, body)
		if err != nil {
			return // not a request a client could send
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: status %d: %s", rt.method, target, body, rec.Code, rec.Body)
		}
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s %q: answer is not a JSON object: %s", rt.method, target, body, rec.Body)
		}
		if rec.Code >= 400 {
			e, ok := m["error"].(map[string]any)
			if !ok || e["code"] == "" || e["message"] == "" {
				t.Fatalf("%s %s: not an OJS error body: %s", rt.method, target, rec.Body)
			}
		}
	})
}

var errBadTarget = errors.New("bad request target")

func newFuzzRequest(method, target string, body []byte) (req *http.Request, err error) {
	defer func() {
		if recover() != nil { // httptest.NewRequest panics on targets no client could send
			req, err = nil, errBadTarget
		}
	}()
	r := httptest.NewRequest(method, target, strings.NewReader(string(body)))
	if len(body) > 0 {
		r.Header.Set("Content-Type", "application/json")
	}
	return r, nil
}

// FuzzHandlerRedis is FuzzHandler over a Redis store.
func FuzzHandlerRedis(f *testing.F) { fuzzHandler(f, newStoreServer(f, "redis")) }
