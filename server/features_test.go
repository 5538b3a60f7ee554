package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Tests of the OJS level 3 and 4 surface: unique jobs, rate limits, workflows. They run on the memory
// store; the conformance runner runs the official cases on every store.

// obj returns body[key] as an object, failing the test when it is not one.
func obj(t *testing.T, r *response, key string) map[string]any {
	t.Helper()
	m, ok := r.body[key].(map[string]any)
	if !ok {
		t.Fatalf("no %q object in %d %s", key, r.status, r.raw)
	}
	return m
}

// errField returns error.details.field.
func errField(r *response) string {
	e, _ := r.body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	f, _ := d["field"].(string)
	return f
}

// fetchOne fetches from queue and returns the one job, or nil when there is none.
func fetchOne(t *testing.T, s *Server, queue string) map[string]any {
	t.Helper()
	r := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"w"}`)
	if r.status != 200 {
		t.Fatalf("fetch %s: %d %s", queue, r.status, r.raw)
	}
	jobs := r.body["jobs"].([]any)
	switch len(jobs) {
	case 0:
		return nil
	case 1:
		return jobs[0].(map[string]any)
	}
	t.Fatalf("fetch %s: %d jobs", queue, len(jobs))
	return nil
}

func ack(t *testing.T, s *Server, id string, result string) {
	t.Helper()
	r := call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w","result":`+result+`}`)
	if r.status != 200 || r.body["state"] != "completed" {
		t.Fatalf("ack %s: %d %s", id, r.status, r.raw)
	}
}

func TestUniqueEnqueue(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	job := func(policy string, args string) string {
		return `{"type":"report.build","args":` + args + `,"options":{"queue":"reports","unique":` + policy + `}}`
	}

	// reject: 409 duplicate naming the job that holds the key.
	reject := `{"keys":["type","args"],"on_conflict":"reject"}`
	r := call(t, s, "POST", "/ojs/v1/jobs", job(reject, `[{"day":"mon"}]`))
	if r.status != 201 {
		t.Fatalf("first unique job: %d %s", r.status, r.raw)
	}
	first := obj(t, r, "job")
	if k, _ := first["unique_key"].(string); len(k) != 64 {
		t.Fatalf("unique_key %v: want the SHA-256 fingerprint in hex", first["unique_key"])
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", job(reject, `[{"day":"mon"}]`))
	checkErrorBody(t, r, 409, CodeDuplicate)
	d := obj(t, r, "error")["details"].(map[string]any)
	if d["existing_job_id"] != first["id"] || d["existing_job_state"] != "available" || d["uniqueness_key"] != first["unique_key"] {
		t.Fatalf("conflict details: %s", r.raw)
	}
	// Other args: another fingerprint.
	if r = call(t, s, "POST", "/ojs/v1/jobs", job(reject, `[{"day":"tue"}]`)); r.status != 201 {
		t.Fatalf("other args: %d %s", r.status, r.raw)
	}

	// ignore: 200 with the existing job and deduplicated, nothing inserted.
	ignore := `{"keys":["type","args"],"on_conflict":"ignore"}`
	r = call(t, s, "POST", "/ojs/v1/jobs", job(ignore, `[{"day":"mon"}]`))
	if r.status != 200 || r.body["deduplicated"] != true || obj(t, r, "job")["id"] != first["id"] {
		t.Fatalf("ignore: %d %s", r.status, r.raw)
	}

	// replace: 201 with the new job; the holder is cancelled.
	replace := `{"keys":["type","args"],"on_conflict":"replace"}`
	r = call(t, s, "POST", "/ojs/v1/jobs", job(replace, `[{"day":"mon"}]`))
	if r.status != 201 || obj(t, r, "job")["id"] == first["id"] || r.body["deduplicated"] != nil {
		t.Fatalf("replace: %d %s", r.status, r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/jobs/"+first["id"].(string), nil)
	if obj(t, r, "job")["state"] != "cancelled" {
		t.Fatalf("replaced job: %s", r.raw)
	}

	// The policy may sit at the envelope's top level, as the unique-jobs document shows it; a period
	// ends the hold.
	top := `{"type":"digest.send","args":[1],"unique":{"period":"PT0.2S"}}`
	if r = call(t, s, "POST", "/ojs/v1/jobs", top); r.status != 201 {
		t.Fatalf("top-level unique: %d %s", r.status, r.raw)
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", top), 409, CodeDuplicate)
	time.Sleep(250 * time.Millisecond)
	if r = call(t, s, "POST", "/ojs/v1/jobs", top); r.status != 201 {
		t.Fatalf("after the period: %d %s", r.status, r.raw)
	}
}

// bigIDArgs are the args of a job named by an int64 id.
type bigIDArgs struct {
	ID int64 `json:"id"`
}

func (bigIDArgs) Kind() string { return "report.build" }

// TestUniqueEnqueueLargeIntegers: ids beyond 2^53 are told apart over HTTP as in Go, and a job
// inserted over HTTP meets the one inserted from Go with the same args.
func TestUniqueEnqueueLargeIntegers(t *testing.T) {
	s, c := newTestServer(t, Config{})
	held, err := c.Insert(context.Background(), bigIDArgs{ID: 9007199254740993},
		&pronto.InsertOpts{Unique: &pronto.UniqueOpts{ByArgs: true}})
	if err != nil {
		t.Fatal(err)
	}
	job := func(args string) string {
		return `{"type":"report.build","args":` + args + `,"options":{"unique":{"keys":["type","args"]}}}`
	}
	for _, same := range []string{`[{"id":9007199254740993}]`, `[{"id":9007199254740993.0}]`, `[{"id":90071992547409930e-1}]`} {
		r := call(t, s, "POST", "/ojs/v1/jobs", job(same))
		checkErrorBody(t, r, 409, CodeDuplicate)
		if d := obj(t, r, "error")["details"].(map[string]any); d["existing_job_id"] != held.ID || d["uniqueness_key"] != held.UniqueKey {
			t.Fatalf("args %s: want a conflict with the job inserted from Go: %s", same, r.raw)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", job(`[{"id":9007199254740992}]`))
	if r.status != 201 {
		t.Fatalf("id 9007199254740992 is another job than 9007199254740993: %d %s", r.status, r.raw)
	}
	if k := obj(t, r, "job")["unique_key"]; k == held.UniqueKey {
		t.Fatalf("9007199254740992 and 9007199254740993 share the fingerprint %s", k)
	}
}

func TestUniquePolicyValidation(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for _, tc := range []struct {
		name, unique, field string
		meta                string
	}{
		{"not an object", `"yes"`, "options.unique", ""},
		{"unknown dimension", `{"keys":["type","argz"]}`, "options.unique.keys", ""},
		{"repeated dimension", `{"keys":["args","args"]}`, "options.unique.keys", ""},
		{"meta without meta_keys", `{"keys":["meta"]}`, "options.unique.meta_keys", `{"tenant":"a"}`},
		{"meta_keys without meta", `{"keys":["type"],"meta_keys":["tenant"]}`, "options.unique.meta_keys", `{"tenant":"a"}`},
		{"meta key absent", `{"keys":["meta"],"meta_keys":["region"]}`, "options.unique.meta_keys", `{"tenant":"a"}`},
		{"reserved meta key", `{"keys":["meta"],"meta_keys":["_pronto"]}`, "options.unique.meta_keys", ""},
		{"args_keys without args", `{"args_keys":["id"]}`, "options.unique.args_keys", ""},
		{"args key absent", `{"keys":["args"],"args_keys":["nope"]}`, "options.unique.args_keys", ""},
		{"bad policy", `{"on_conflict":"overwrite"}`, "options.unique.on_conflict", ""},
		{"policy not a string", `{"on_conflict":1}`, "options.unique.on_conflict", ""},
		{"period not ISO", `{"period":"1h"}`, "options.unique.period", ""},
		{"period zero", `{"period":"PT0S"}`, "options.unique.period", ""},
		{"unknown state", `{"states":["done"]}`, "options.unique.states", ""},
		{"no states", `{"states":[]}`, "options.unique.states", ""},
		{"unknown member", `{"kees":["type"]}`, "options.unique.kees", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"type":"a.b","args":[{"id":1}],"options":{"unique":` + tc.unique + `}}`
			if tc.meta != "" {
				body = `{"type":"a.b","args":[{"id":1}],"meta":` + tc.meta + `,"options":{"unique":` + tc.unique + `}}`
			}
			r := call(t, s, "POST", "/ojs/v1/jobs", body)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if f := errField(r); f != tc.field {
				t.Fatalf("field %q, want %q: %s", f, tc.field, r.raw)
			}
		})
	}
	// use_existing, the OpenAPI document's name, is ignore.
	body := `{"type":"a.b","args":[],"options":{"unique":{"on_conflict":"use_existing"}}}`
	call(t, s, "POST", "/ojs/v1/jobs", body)
	if r := call(t, s, "POST", "/ojs/v1/jobs", body); r.status != 200 || r.body["deduplicated"] != true {
		t.Fatalf("use_existing: %d %s", r.status, r.raw)
	}
	// A cron registration keeps its template's unique policy (each occurrence is inserted with it).
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"c","expression":"* * * * *","job_template":{"type":"a.b","args":[],"options":{"unique":{}}}}`)
	if r.status != 201 {
		t.Fatalf("cron with a unique template: %d %s", r.status, r.raw)
	}
}

func TestUniqueBatch(t *testing.T) {
	s, _ := newTestServer(t, Config{MaxBatch: 3})
	held := `{"type":"sync.account","args":[7],"options":{"queue":"sync","unique":{"keys":["args"]}}}`
	if r := call(t, s, "POST", "/ojs/v1/jobs", held); r.status != 201 {
		t.Fatalf("holder: %s", r.raw)
	}
	// reject: the whole batch is refused; nothing of it is stored.
	r := call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"other.job","args":[],"options":{"queue":"sync"}},`+held+`]}`)
	checkErrorBody(t, r, 409, CodeDuplicate)
	r = call(t, s, "GET", "/ojs/v1/queues/sync/stats", nil)
	if n := obj(t, r, "queue")["available"]; n != 1.0 {
		t.Fatalf("a refused batch stored jobs: %s", r.raw)
	}
	// ignore: the duplicate stands in for the existing job, the rest is inserted.
	ignored := strings.Replace(held, `"keys":["args"]`, `"keys":["args"],"on_conflict":"ignore"`, 1)
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"other.job","args":[],"options":{"queue":"sync"}},`+ignored+`]}`)
	if r.status != 201 {
		t.Fatalf("batch with ignore: %d %s", r.status, r.raw)
	}
	jobs := r.body["jobs"].([]any)
	if jobs[0].(map[string]any)["deduplicated"] != nil || jobs[1].(map[string]any)["deduplicated"] != true {
		t.Fatalf("batch with ignore: %s", r.raw)
	}
	// Oversized batch.
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[]},{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if f := errField(r); f != "jobs" {
		t.Fatalf("oversized batch field %q: %s", f, r.raw)
	}
}

func TestRateLimitOption(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for i := 0; i < 3; i++ {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"rl.job","args":[],"options":{"queue":"rl","rate_limit":{"max_per_second":1}}}`)
		if r.status != 201 || obj(t, r, "job")["rate_limit_key"] != "queue:rl" {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
	}
	if fetchOne(t, s, "rl") == nil {
		t.Fatal("the first job of the window was not fetched")
	}
	if j := fetchOne(t, s, "rl"); j != nil {
		t.Fatalf("a second job started within the second: %v", j)
	}
	r := call(t, s, "GET", "/ojs/v1/rate-limits/queue:rl", nil)
	rate, _ := r.body["rate"].(map[string]any)
	if r.status != 200 || r.body["key"] != "queue:rl" || rate["limit"] != 1.0 || rate["period"] != "PT1S" ||
		rate["current_count"] != 1.0 || r.body["waiting_count"] != 2.0 || r.body["on_limit"] != "wait" {
		t.Fatalf("rate limit view: %d %s", r.status, r.raw)
	}
	time.Sleep(1100 * time.Millisecond)
	if fetchOne(t, s, "rl") == nil {
		t.Fatal("the next window did not start a job")
	}

	// The spec's shape, with a key: the stored limit is the job's, and a job naming only the key
	// follows it without replacing it.
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"api.call","args":[],"options":{"queue":"api","rate_limit":{"key":"partner-api","concurrency":1,"rate":{"limit":100,"period":"PT1M"},"on_limit":"wait"}}}`)
	if r.status != 201 {
		t.Fatalf("spec shape: %d %s", r.status, r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"api.call","args":[],"options":{"queue":"api","rate_limit":{"key":"partner-api"}}}`)
	if r.status != 201 {
		t.Fatalf("key only: %d %s", r.status, r.raw)
	}
	if fetchOne(t, s, "api") == nil || fetchOne(t, s, "api") != nil {
		t.Fatal("concurrency 1: want one job, then none while it runs")
	}
	r = call(t, s, "GET", "/ojs/v1/rate-limits/partner-api", nil)
	conc, _ := r.body["concurrency"].(map[string]any)
	if conc["limit"] != 1.0 || conc["active"] != 1.0 || conc["available"] != 0.0 {
		t.Fatalf("concurrency view: %s", r.raw)
	}

	for _, tc := range []struct{ name, policy, field string }{
		{"not an object", `5`, "options.rate_limit"},
		{"nothing", `{}`, "options.rate_limit"},
		{"throttle", `{"key":"k","throttle":{"limit":1,"period":"PT1S"}}`, "options.rate_limit.throttle"},
		{"concurrency zero", `{"key":"k","concurrency":0}`, "options.rate_limit.concurrency"},
		{"bad key", `{"key":"no spaces","concurrency":1}`, "options.rate_limit.key"},
		{"rate without period", `{"rate":{"limit":5}}`, "options.rate_limit.rate.period"},
		{"rate period not ISO", `{"rate":{"limit":5,"period":"60s"}}`, "options.rate_limit.rate.period"},
		{"rate and max_per_second", `{"rate":{"limit":5,"period":"PT1S"},"max_per_second":2}`, "options.rate_limit.max_per_second"},
		{"bad on_limit", `{"concurrency":1,"on_limit":"queue"}`, "options.rate_limit.on_limit"},
		{"unknown member", `{"concurency":1}`, "options.rate_limit.concurency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"rate_limit":`+tc.policy+`}}`)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if f := errField(r); f != tc.field {
				t.Fatalf("field %q, want %q: %s", f, tc.field, r.raw)
			}
		})
	}
}

func TestRateLimitEndpoints(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "GET", "/ojs/v1/rate-limits", nil)
	if r.status != 200 || len(r.body["items"].([]any)) != 0 {
		t.Fatalf("empty list: %d %s", r.status, r.raw)
	}
	r = call(t, s, "PUT", "/ojs/v1/rate-limits/tenant:acme", `{"concurrency":5,"rate":{"limit":100,"period":"PT1M"},"on_limit":"reschedule"}`)
	if r.status != 200 || r.body["key"] != "tenant:acme" || r.body["on_limit"] != "reschedule" ||
		r.body["concurrency"].(map[string]any)["limit"] != 5.0 || r.body["rate"].(map[string]any)["period"] != "PT1M" {
		t.Fatalf("put: %d %s", r.status, r.raw)
	}
	// PUT replaces the whole limit.
	r = call(t, s, "PUT", "/ojs/v1/rate-limits/tenant:acme", `{"key":"tenant:acme","max_per_second":3}`)
	if r.status != 200 || r.body["concurrency"] != nil || r.body["rate"].(map[string]any)["limit"] != 3.0 || r.body["on_limit"] != "wait" {
		t.Fatalf("put again: %d %s", r.status, r.raw)
	}
	call(t, s, "PUT", "/ojs/v1/rate-limits/api.stripe.com", `{"concurrency":2}`)
	r = call(t, s, "GET", "/ojs/v1/rate-limits", nil)
	items := r.body["items"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["key"] != "api.stripe.com" || items[1].(map[string]any)["key"] != "tenant:acme" {
		t.Fatalf("list: %s", r.raw)
	}
	if p := r.body["pagination"].(map[string]any); p["total"] != 2.0 {
		t.Fatalf("pagination: %s", r.raw)
	}
	r = call(t, s, "DELETE", "/ojs/v1/rate-limits/tenant:acme", nil)
	if r.status != 200 || r.body["deleted"] != true || r.body["key"] != "tenant:acme" {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/rate-limits/tenant:acme", nil), 404, CodeNotFound)
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/rate-limits/tenant:acme", nil), 404, CodeNotFound)

	for _, tc := range []struct {
		name, method, path, body, field string
		status                          int
	}{
		{"bad key", "GET", "/ojs/v1/rate-limits/-bad", "", "key", 400},
		{"bad key on put", "PUT", "/ojs/v1/rate-limits/a%20b", `{"concurrency":1}`, "key", 400},
		{"body key differs", "PUT", "/ojs/v1/rate-limits/a", `{"key":"b","concurrency":1}`, "key", 400},
		{"no bound", "PUT", "/ojs/v1/rate-limits/a", `{"on_limit":"drop"}`, "", 400},
		{"expires_at", "PUT", "/ojs/v1/rate-limits/a", `{"concurrency":1,"expires_at":"2030-01-01T00:00:00Z"}`, "expires_at", 400},
		{"throttle", "PUT", "/ojs/v1/rate-limits/a", `{"throttle":{"limit":1,"period":"PT1S"}}`, "throttle", 400},
		{"not JSON", "PUT", "/ojs/v1/rate-limits/a", `{nope`, "", 400},
		{"wrong method", "POST", "/ojs/v1/rate-limits/a", `{}`, "", 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := call(t, s, tc.method, tc.path, body)
			checkErrorBody(t, r, tc.status, "")
			if f := errField(r); f != tc.field {
				t.Fatalf("field %q, want %q: %s", f, tc.field, r.raw)
			}
		})
	}
}

func TestWorkflowChain(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"etl","options":{"queue":"etl"},
		"steps":[{"type":"etl.extract","args":[1]},{"type":"etl.transform","args":[2]},{"type":"etl.load","args":[3],"options":{"queue":"load"}}]}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	wf := obj(t, r, "workflow")
	id := wf["id"].(string)
	if r.header.Get("Location") != "/ojs/v1/workflows/"+id || wf["type"] != "chain" || wf["name"] != "etl" ||
		wf["state"] != "running" || wf["steps_total"] != 3.0 || wf["steps_completed"] != 0.0 || wf["jobs_total"] != 3.0 {
		t.Fatalf("create: %s", r.raw)
	}
	jobs := r.body["jobs"].([]any)
	states := []string{}
	for _, j := range jobs {
		states = append(states, fmt.Sprint(j.(map[string]any)["state"], "@", j.(map[string]any)["queue"]))
	}
	if strings.Join(states, " ") != "available@etl pending@etl pending@load" {
		t.Fatalf("created jobs: %v", states)
	}

	j := fetchOne(t, s, "etl")
	if j["type"] != "etl.extract" || j["workflow_id"] != id || j["parent_results"] != nil {
		t.Fatalf("step 0: %v", j)
	}
	ack(t, s, j["id"].(string), `{"rows":42}`)
	j = fetchOne(t, s, "etl")
	pr, _ := json.Marshal(j["parent_results"])
	if j["type"] != "etl.transform" || string(pr) != `[{"rows":42}]` {
		t.Fatalf("step 1: %v", j)
	}
	ack(t, s, j["id"].(string), `"done"`)
	r = call(t, s, "GET", "/ojs/v1/workflows/"+id, nil)
	if wf = obj(t, r, "workflow"); wf["steps_completed"] != 2.0 || wf["state"] != "running" {
		t.Fatalf("after two steps: %s", r.raw)
	}
	j = fetchOne(t, s, "load")
	ack(t, s, j["id"].(string), `null`)
	r = call(t, s, "GET", "/ojs/v1/workflows/"+id, nil)
	wf = obj(t, r, "workflow")
	if wf["state"] != "completed" || wf["steps_completed"] != 3.0 || wf["finished_at"] == nil {
		t.Fatalf("completed: %s", r.raw)
	}
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/workflows/"+id, nil), 409, CodeConflict)

	r = call(t, s, "GET", "/ojs/v1/workflows/"+id+"/jobs", nil)
	if jobs := r.body["jobs"].([]any); r.status != 200 || len(jobs) != 3 || obj(t, r, "workflow")["id"] != id {
		t.Fatalf("jobs: %d %s", r.status, r.raw)
	}
}

func TestWorkflowBatchCallbacksAndCancel(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"batch","name":"mail",
		"jobs":[{"type":"mail.send","args":[1],"options":{"queue":"mail"}},{"type":"mail.send","args":[2],"options":{"queue":"mail","retry":{"max_attempts":1}}}],
		"callbacks":{"on_success":{"type":"mail.ok","args":[],"options":{"queue":"cb-ok"}},
		             "on_failure":{"type":"mail.failed","args":[],"options":{"queue":"cb-failed"}},
		             "on_complete":{"type":"mail.done","args":[],"options":{"queue":"cb-done"}}}}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	id := obj(t, r, "workflow")["id"].(string)
	if jobs := r.body["jobs"].([]any); len(jobs) != 5 || jobs[4].(map[string]any)["workflow_callback"] != "on_complete" {
		t.Fatalf("created jobs: %s", r.raw)
	}
	ack(t, s, fetchOne(t, s, "mail")["id"].(string), `1`)
	j := fetchOne(t, s, "mail")
	call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+j["id"].(string)+`","worker_id":"w","claim_token":"`+j["claim_token"].(string)+`","error":{"code":"x","message":"bounced"}}`)
	if fetchOne(t, s, "cb-ok") != nil {
		t.Fatal("on_success ran after a failure")
	}
	cb := fetchOne(t, s, "cb-failed")
	if cb == nil || cb["type"] != "mail.failed" {
		t.Fatalf("on_failure: %v", cb)
	}
	if pr, _ := json.Marshal(cb["parent_results"]); string(pr) != `[1,null]` {
		t.Fatalf("callback parent_results %s", pr)
	}
	done := fetchOne(t, s, "cb-done")
	if done == nil {
		t.Fatal("on_complete did not run")
	}
	// The batch stays running until its callbacks end (ojs-workflows.md 9.4, 9.5).
	r = call(t, s, "GET", "/ojs/v1/workflows/"+id, nil)
	if wf := obj(t, r, "workflow"); wf["state"] != "running" {
		t.Fatalf("a failed batch whose callbacks still run: %s", r.raw)
	}
	ack(t, s, cb["id"].(string), `null`)
	ack(t, s, done["id"].(string), `null`)
	r = call(t, s, "GET", "/ojs/v1/workflows/"+id, nil)
	if wf := obj(t, r, "workflow"); wf["state"] != "failed" || wf["jobs_completed"] != 1.0 || wf["jobs_failed"] != 1.0 {
		t.Fatalf("failed batch: %s", r.raw)
	}

	// Cancel a running group: its jobs are cancelled; cancelling again is 409.
	r = call(t, s, "POST", "/ojs/v1/workflows", `{"type":"group","jobs":[{"type":"g.a","args":[],"options":{"queue":"g"}},{"type":"g.b","args":[],"options":{"queue":"g"}}]}`)
	id = obj(t, r, "workflow")["id"].(string)
	r = call(t, s, "DELETE", "/ojs/v1/workflows/"+id, nil)
	if wf := obj(t, r, "workflow"); r.status != 200 || wf["state"] != "cancelled" || wf["cancelled_at"] == nil {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	if fetchOne(t, s, "g") != nil {
		t.Fatal("a job of a cancelled group was fetched")
	}
	r = call(t, s, "DELETE", "/ojs/v1/workflows/"+id, nil)
	checkErrorBody(t, r, 409, CodeConflict)
}

func TestWorkflowDAG(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"dag","options":{"queue":"d"},"steps":[
		{"name":"a","type":"d.a","args":[]},{"name":"b","type":"d.b","args":[]},
		{"name":"c","type":"d.c","args":[],"depends_on":["a","b"]}]}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	jobs := r.body["jobs"].([]any)
	c := jobs[2].(map[string]any)
	if c["state"] != "pending" || len(c["depends_on"].([]any)) != 2 || c["name"] != "c" {
		t.Fatalf("step c: %v", c)
	}
	ack(t, s, fetchOne(t, s, "d")["id"].(string), `"A"`)
	ack(t, s, fetchOne(t, s, "d")["id"].(string), `"B"`)
	j := fetchOne(t, s, "d")
	if pr, _ := json.Marshal(j["parent_results"]); j["type"] != "d.c" || string(pr) != `["A","B"]` {
		t.Fatalf("step c: %v", j)
	}
}

func TestWorkflowValidation(t *testing.T) {
	s, _ := newTestServer(t, Config{MaxBatch: 3})
	step := `{"type":"a.b","args":[]}`
	for _, tc := range []struct{ name, body, field string }{
		{"no type", `{"steps":[` + step + `]}`, "type"},
		{"unknown type", `{"type":"pipeline","steps":[` + step + `]}`, "type"},
		{"type not a string", `{"type":1,"steps":[` + step + `]}`, "type"},
		{"no steps", `{"type":"chain"}`, "steps"},
		{"no jobs", `{"type":"group"}`, "jobs"},
		{"empty steps", `{"type":"chain","steps":[]}`, "steps"},
		{"steps not an array", `{"type":"chain","steps":{}}`, "steps"},
		{"steps and jobs", `{"type":"chain","steps":[` + step + `],"jobs":[` + step + `]}`, "jobs"},
		{"too many", `{"type":"group","jobs":[` + step + `,` + step + `,` + step + `,` + step + `]}`, "jobs"},
		{"step with a bad type", `{"type":"chain","steps":[` + step + `,` + step + `,{"type":"Bad Type","args":[]}]}`, "steps[2].type"},
		{"step without args", `{"type":"group","jobs":[{"type":"a.b"}]}`, "jobs[0].args"},
		{"step not an object", `{"type":"group","jobs":[1]}`, "jobs[0]"},
		{"step option", `{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"priority":"urgent"}}]}`, "steps[0].options.priority"},
		{"unique step", `{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"unique":{}}}]}`, "steps[0].options.unique"},
		{"pending step", `{"type":"chain","steps":[{"type":"a.b","args":[],"options":{"pending":true}}]}`, "steps[0].options.pending"},
		{"unknown member", `{"type":"chain","stepz":[` + step + `]}`, "stepz"},
		{"bad default options", `{"type":"chain","options":{"queue":"Bad!"},"steps":[` + step + `]}`, "steps[0].options.queue"},
		{"unknown callback", `{"type":"batch","jobs":[` + step + `],"callbacks":{"on_done":` + step + `}}`, "callbacks.on_done"},
		{"bad callback", `{"type":"batch","jobs":[` + step + `],"callbacks":{"on_success":{"type":"a.b","args":1}}}`, "callbacks.on_success.args"},
		{"depends_on outside dag", `{"type":"chain","steps":[{"type":"a.b","args":[],"depends_on":[]}]}`, "steps[0].depends_on"},
		{"dag step without name", `{"type":"dag","steps":[` + step + `]}`, "steps[0].name"},
		{"dag unknown parent", `{"type":"dag","steps":[{"name":"x","type":"a.b","args":[],"depends_on":["y"]}]}`, "steps[0].depends_on"},
		{"dag repeated name", `{"type":"dag","steps":[{"name":"x","type":"a.b","args":[]},{"name":"x","type":"a.b","args":[]}]}`, "steps[1].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", "/ojs/v1/workflows", tc.body)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if f := errField(r); f != tc.field {
				t.Fatalf("field %q, want %q: %s", f, tc.field, r.raw)
			}
		})
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workflows", `{"type":`), 400, CodeInvalidPayload)
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workflows", ``), 400, CodeInvalidRequest)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/workflows/not-an-id", nil), 400, CodeInvalidRequest)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000", nil), 404, CodeNotFound)
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000", nil), 404, CodeNotFound)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000/jobs", nil), 404, CodeNotFound)
	checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/workflows/019539a4-0000-7000-8000-000000000000", `{}`), 405, CodeMethodNotAllowed)
	// Nothing refused above was stored.
	r := call(t, s, "GET", "/ojs/v1/queues", nil)
	if qs := r.body["queues"].([]any); len(qs) != 0 {
		t.Fatalf("refused workflows stored jobs: %s", r.raw)
	}
}

func TestManifestLevel4(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "GET", "/ojs/manifest", nil)
	caps := obj(t, r, "capabilities")
	if r.body["conformance_level"] != 4.0 || caps["workflows"] != true || caps["unique_jobs"] != true ||
		caps["rate_limiting"] != true || obj(t, r, "x-pronto-unique-jobs")["strength"] != "strong" {
		t.Fatalf("manifest: %s", r.raw)
	}
}

func TestWorkflowDuplicateJobID(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := "019539a4-0000-7000-8000-0000000000aa"
	if r := call(t, s, "POST", "/ojs/v1/jobs", `{"id":"`+id+`","type":"a.b","args":[]}`); r.status != 201 {
		t.Fatalf("enqueue: %s", r.raw)
	}
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"group","jobs":[{"type":"a.b","args":[]},{"id":"`+id+`","type":"a.b","args":[]}]}`)
	checkErrorBody(t, r, 409, CodeDuplicate)
	r = call(t, s, "GET", "/ojs/v1/queues/default/stats", nil)
	if n := obj(t, r, "queue")["available"]; n != 1.0 {
		t.Fatalf("a refused workflow stored jobs: %s", r.raw)
	}
}
