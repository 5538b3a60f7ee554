package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/teststore"
)

// storeKinds are every store the server runs on, for the tests that must see each accept and
// refuse alike.
var storeKinds = teststore.Kinds

// newStoreServer returns a Server over a fresh store of the given kind (PostgreSQL in a schema of its
// own, with a small pool) and a started insert-only client.
func newStoreServer(t testing.TB, kind string) *Server {
	t.Helper()
	st := openStore(t, kind)
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	return s
}

// unstorableValues are JSON values no store can hold, as a client could send them.
var unstorableValues = map[string]string{
	"escaped NUL":      `"a\u0000b"`,
	"invalid UTF-8":    "\"a\xffb\"",
	"lone surrogate":   `"\ud800"`,
	"number too large": `1e1000000`,
}

// unstorableBodies are requests carrying X (replaced by each unstorable value) in each place a client
// can put it, with the field the refusal must name.
var unstorableBodies = []struct {
	name, method, path, body, field string
}{
	{"enqueue args", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":["ok",X]}`, "args[1]"},
	{"enqueue meta", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"trace":{"id":X}}}`, "meta.trace.id"},
	{"enqueue tags", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"tags":["a",X]}}`, "options.tags[1]"},
	{"enqueue queue", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":X}}`, "options.queue"},
	{"enqueue metadata", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"metadata":{"k":X}}}`, "options.metadata.k"},
	{"enqueue unknown attribute", "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"x_custom":[X]}`, "x_custom[0]"},
	{"batch", "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[X]}]}`, "args[0]"},
	{"bulk enqueue", "POST", "/ojs/v1/jobs/bulk", `{"atomic":true,"jobs":[{"type":"a.b","args":[X]}]}`, "args[0]"},
	{"workflow step", "POST", "/ojs/v1/workflows", `{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]},{"type":"a.b","args":[{"v":X}]}]}`, "steps[1].args[0].v"},
	{"workflow name", "POST", "/ojs/v1/workflows", `{"type":"chain","name":X,"steps":[{"type":"a.b","args":[]}]}`, "name"},
	{"cron template", "POST", "/ojs/v1/cron", `{"name":"n","expression":"*/5 * * * *","job_template":{"type":"a.b","args":[X]}}`, "job_template.args[0]"},
	{"cron description", "POST", "/ojs/v1/cron", `{"name":"n","expression":"*/5 * * * *","description":X,"job_template":{"type":"a.b","args":[]}}`, "description"},
	{"cron expression", "POST", "/ojs/v1/cron", `{"name":"n","expression":X,"job_template":{"type":"a.b","args":[]}}`, "expression"},
	{"fetch worker_id", "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"worker_id":X}`, "worker_id"},
	{"fetch queues", "POST", "/ojs/v1/workers/fetch", `{"queues":["default",X]}`, "queues[1]"},
	{"ack result", "POST", "/ojs/v1/workers/ack", `{"job_id":"ID","worker_id":"w","result":{"v":[X]}}`, "result.v[0]"},
	{"heartbeat worker_id", "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":X,"active_jobs":["ID"]}`, "worker_id"},
	{"bulk cancel filter", "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":X}}`, "filter.queue"},
	{"rate limit", "PUT", "/ojs/v1/rate-limits/k", `{"concurrency":1,"x":X}`, "x"},
}

// TestUnstorableInputRefused: on every store, input that some store cannot hold is refused with 400
// invalid_request naming the field, and nothing stored changes.
func TestUnstorableInputRefused(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":["stored"],"meta":{"m":1}}`)
			if r.status != 201 {
				t.Fatalf("enqueue: %d %s", r.status, r.raw)
			}
			id := r.body["job"].(map[string]any)["id"].(string)
			before := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil).raw
			for _, b := range unstorableBodies {
				for vname, v := range unstorableValues {
					body := strings.ReplaceAll(strings.ReplaceAll(b.body, "X", v), "ID", id)
					r := call(t, s, b.method, b.path, body)
					t.Run(b.name+"/"+vname, func(t *testing.T) {
						var e map[string]any
						if b.path == "/ojs/v1/jobs/bulk" {
							// Bulk enqueue answers each item: 422, the item's error inside.
							items, _ := r.body["items"].([]any)
							if r.status != 422 || len(items) != 1 {
								t.Fatalf("status %d: %s", r.status, r.raw)
							}
							e, _ = items[0].(map[string]any)["error"].(map[string]any)
							if e["code"] != CodeInvalidRequest {
								t.Fatalf("item error %v", e)
							}
						} else {
							checkErrorBody(t, r, 400, CodeInvalidRequest)
							e = r.body["error"].(map[string]any)
						}
						det, _ := e["details"].(map[string]any)
						if det["field"] != b.field {
							t.Fatalf("field %v, want %s: %s", det["field"], b.field, r.raw)
						}
						if msg := e["message"].(string); !strings.Contains(msg, b.field+": ") {
							t.Fatalf("message does not name %s: %s", b.field, msg)
						}
						if e["retryable"] != false {
							t.Fatalf("retryable: %s", r.raw)
						}
					})
				}
			}
			// Names in the path: refused before any store's query.
			for _, m := range []string{"GET", "DELETE"} {
				for _, p := range []string{"/ojs/v1/cron/n%00", "/ojs/v1/cron/n%FF"} {
					r := call(t, s, m, p, nil)
					checkErrorBody(t, r, 400, CodeInvalidRequest)
				}
			}
			if after := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil).raw; string(after) != string(before) {
				t.Fatalf("the stored job changed:\n%s\n%s", before, after)
			}
			// Nothing else was stored: the one job is all a fetch finds.
			r = call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"count":100,"worker_id":"w"}`)
			if jobs := r.body["jobs"].([]any); len(jobs) != 1 {
				t.Fatalf("fetch found %d jobs, want the 1 stored: %s", len(jobs), r.raw)
			}
		})
	}
}

// TestNackUnstorableErrorStored: a worker's error text is stored whatever it holds, on every store:
// the nack succeeds and the message reads back with NUL as U+2400 and bad bytes as U+FFFD.
func TestNackUnstorableErrorStored(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":{"max_attempts":1}}}`)
			id := r.body["job"].(map[string]any)["id"].(string)
			r = call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"worker_id":"w"}`)
			if r.status != 200 || len(r.body["jobs"].([]any)) != 1 {
				t.Fatalf("fetch: %d %s", r.status, r.raw)
			}
			body := `{"job_id":"` + id + `","worker_id":"w","error":{"code":"c\u0000","message":"boom\u0000 ` + "\xff" + ` \ud800","details":{"n":1e1000000,"k\u0000":"v"}}}`
			r = call(t, s, "POST", "/ojs/v1/workers/nack", body)
			if r.status != 200 {
				t.Fatalf("nack: %d %s", r.status, r.raw)
			}
			r = call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
			if !strings.Contains(string(r.raw), "boom"+jsoncheck.NULReplacement+" \ufffd \ufffd") {
				t.Fatalf("the error message is not stored sanitized: %s", r.raw)
			}
			if !json.Valid(r.raw) {
				t.Fatalf("answer is not valid JSON: %q", r.raw)
			}
		})
	}
}

// TestDatabaseInputErrorIsNotRetryable: a database error the request's data caused is a 400 (a
// unique violation a 409), never a retryable 500.
func TestDatabaseInputErrorIsNotRetryable(t *testing.T) {
	for code, status := range map[string]int{"22P05": 400, "22021": 400, "22003": 400, "23514": 400, "23505": 409, "54000": 400, "53300": 500, "40001": 500} {
		e := fromClientError(sqlStateErr(code), "job", "")
		if e.status != status || (status < 500) == e.retryable {
			t.Errorf("SQLSTATE %s: status %d retryable %v, want %d", code, e.status, e.retryable, status)
		}
	}
}

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "ERROR: something (SQLSTATE " + string(e) + ")" }
func (e sqlStateErr) SQLState() string { return string(e) }

// TestVisibilityTimeoutBound: options.visibility_timeout_ms (and visibility_timeout) at enqueue is
// bounded as fetch bounds it, 1 ms to MaxVisibilityTimeout; a job stored with a longer one (before the
// bound) is leased for at most MaxVisibilityTimeout.
func TestVisibilityTimeoutBound(t *testing.T) {
	s, c := newTestServer(t, Config{})
	maxMS := strconv.FormatInt(MaxVisibilityTimeout.Milliseconds(), 10)
	overMS := strconv.FormatInt(MaxVisibilityTimeout.Milliseconds()+1, 10)
	for _, tc := range []struct {
		opts   string
		status int
	}{
		{`"visibility_timeout_ms":` + maxMS, 201},
		{`"visibility_timeout_ms":1`, 201},
		{`"visibility_timeout_ms":` + overMS, 400},
		{`"visibility_timeout_ms":9223372036854`, 400},
		{`"visibility_timeout_ms":0`, 400},
		{`"visibility_timeout":"P7D"`, 201},
		{`"visibility_timeout":"P8D"`, 400},
	} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{`+tc.opts+`}}`)
		if r.status != tc.status {
			t.Fatalf("%s: %d, want %d: %s", tc.opts, r.status, tc.status, r.raw)
		}
		if tc.status == 400 {
			checkErrorBody(t, r, 400, CodeInvalidRequest)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"worker_id":"w","visibility_timeout_ms":`+overMS+`}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)

	// A job stored with a lease beyond the bound (as the API allowed before) is held at most 7 days.
	rows, err := c.InsertOJS(context.Background(), []pronto.OJSJob{{Kind: "old.job", Args: json.RawMessage(`[]`),
		Meta: json.RawMessage(`{"_pronto":{"vt":9223372036854}}`), Opts: pronto.InsertOpts{Queue: "old"}}})
	if err != nil {
		t.Fatal(err)
	}
	r = call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["old"],"worker_id":"w"}`)
	jobs, _ := r.body["jobs"].([]any)
	if r.status != 200 || len(jobs) != 1 {
		t.Fatalf("fetch: %d %s", r.status, r.raw)
	}
	j, err := c.JobGet(context.Background(), rows[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if limit := time.Now().Add(MaxVisibilityTimeout + time.Minute); j.LeaseExpiresAt.After(limit) {
		t.Fatalf("lease until %s, beyond %s", j.LeaseExpiresAt, limit)
	}
}
