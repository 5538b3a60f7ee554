package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// Tests of the OJS bulk operations: POST /ojs/v1/jobs/bulk and /ojs/v1/jobs/bulk/{cancel,retry,delete}.

// bulkItems returns the items of a bulk answer, failing unless there are n of them in index order.
func bulkItems(t *testing.T, r *response, n int) []map[string]any {
	t.Helper()
	raw, ok := r.body["items"].([]any)
	if !ok || len(raw) != n {
		t.Fatalf("want %d items: %d %s", n, r.status, r.raw)
	}
	items := make([]map[string]any, n)
	for i, it := range raw {
		items[i] = it.(map[string]any)
		if items[i]["index"] != float64(i) {
			t.Fatalf("item %d has index %v: %s", i, items[i]["index"], r.raw)
		}
	}
	return items
}

// wantCounts checks the status and the summary counters of a bulk answer.
func wantCounts(t *testing.T, r *response, status int, counts map[string]float64) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	for k, v := range counts {
		if r.body[k] != v {
			t.Fatalf("%s = %v, want %v: %s", k, r.body[k], v, r.raw)
		}
	}
}

// enqueueIn enqueues one job into queue and returns its id.
func enqueueIn(t *testing.T, s *Server, queue, extra string) string {
	t.Helper()
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"bulk.test","args":[],"options":{"queue":"`+queue+`"`+extra+`}}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	return obj(t, r, "job")["id"].(string)
}

// jobState returns the state of a job, or "" when it does not exist.
func jobState(t *testing.T, s *Server, id string) string {
	t.Helper()
	r := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
	if r.status == 404 {
		return ""
	}
	return obj(t, r, "job")["state"].(string)
}

// finished makes a completed and a discarded job (through a remote worker) in queue "done".
func finished(t *testing.T, s *Server) (completed, discarded string) {
	t.Helper()
	enqueueIn(t, s, "done", "")
	enqueueIn(t, s, "done", "")
	completed = fetchOne(t, s, "done")["id"].(string)
	ack(t, s, completed, "null")
	discarded = fetchOne(t, s, "done")["id"].(string)
	r := call(t, s, "POST", "/ojs/v1/workers/nack",
		`{"job_id":"`+discarded+`","worker_id":"w","error":{"code":"x","message":"hopeless","retryable":false}}`)
	if r.status != 200 || r.body["state"] != "discarded" {
		t.Fatalf("nack: %d %s", r.status, r.raw)
	}
	return completed, discarded
}

func TestBulkEnqueuePartial(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	ok := `{"type":"bulk.test","args":[1],"options":{"queue":"imports"}}`
	bad := `{"type":"Bad Type","args":[]}`
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[`+ok+`,`+bad+`,`+ok+`]}`)
	wantCounts(t, r, 207, map[string]float64{"total": 3, "succeeded": 2, "failed": 1})
	if r.header.Get("X-OJS-Batch-Size") != "3" {
		t.Fatalf("X-OJS-Batch-Size %q", r.header.Get("X-OJS-Batch-Size"))
	}
	items := bulkItems(t, r, 3)
	for _, i := range []int{0, 2} {
		job, _ := items[i]["job"].(map[string]any)
		if items[i]["status"] != "created" || job == nil || job["queue"] != "imports" {
			t.Fatalf("item %d: %v", i, items[i])
		}
		if st := jobState(t, s, job["id"].(string)); st != "available" {
			t.Fatalf("item %d was not stored: state %q", i, st)
		}
	}
	e, _ := items[1]["error"].(map[string]any)
	if items[1]["status"] != "failed" || e["code"] != CodeInvalidRequest || items[1]["job"] != nil {
		t.Fatalf("item 1: %v", items[1])
	}

	// All succeed: 200. All fail: 422.
	wantCounts(t, call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"partial","jobs":[`+ok+`]}`), 200,
		map[string]float64{"total": 1, "succeeded": 1, "failed": 0})
	wantCounts(t, call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[`+bad+`,`+bad+`]}`), 422,
		map[string]float64{"total": 2, "succeeded": 0, "failed": 2})

	// A job held by a unique key is a duplicate (on_conflict ignore) or a failure (reject); the
	// other items are enqueued.
	uniq := func(policy string) string {
		return `{"type":"report.build","args":[1],"options":{"unique":{"keys":["type","args"],"on_conflict":"` + policy + `"}}}`
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[`+uniq("reject")+`,`+uniq("ignore")+`,`+uniq("reject")+`,`+ok+`]}`)
	wantCounts(t, r, 207, map[string]float64{"total": 4, "succeeded": 3, "failed": 1})
	items = bulkItems(t, r, 4)
	first := items[0]["job"].(map[string]any)["id"]
	if items[0]["status"] != "created" || items[1]["status"] != "duplicate" || items[1]["job"].(map[string]any)["id"] != first {
		t.Fatalf("unique items: %s", r.raw)
	}
	if e, _ := items[2]["error"].(map[string]any); items[2]["status"] != "failed" || e["code"] != CodeDuplicate {
		t.Fatalf("rejected duplicate: %v", items[2])
	}
}

func TestBulkEnqueueAtomic(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	job := func(id string) string {
		return `{"id":"` + id + `","type":"bulk.test","args":[],"options":{"queue":"atomic"}}`
	}
	a, b := uuidv7.New(), uuidv7.New()

	// An invalid envelope: nothing is created, the culprit is named, the others rolled back.
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+job(a)+`,{"type":"x","args":{}}]}`)
	wantCounts(t, r, 422, map[string]float64{"total": 2, "succeeded": 0, "failed": 2})
	items := bulkItems(t, r, 2)
	if e := items[0]["error"].(map[string]any); e["code"] != "rolled_back" {
		t.Fatalf("item 0: %v", items[0])
	}
	if e := items[1]["error"].(map[string]any); e["code"] != CodeInvalidRequest {
		t.Fatalf("item 1: %v", items[1])
	}
	if st := jobState(t, s, a); st != "" {
		t.Fatalf("atomic batch left job %s in state %s", a, st)
	}

	// An envelope refused at decoding (a priority out of range) names its job too.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+job(a)+`,`+
		`{"type":"bulk.test","args":[],"options":{"priority":1000}}]}`)
	wantCounts(t, r, 422, map[string]float64{"failed": 2})
	items = bulkItems(t, r, 2)
	if e := items[1]["error"].(map[string]any); e["code"] != CodeInvalidRequest {
		t.Fatalf("priority culprit: %s", r.raw)
	}
	if e := items[0]["error"].(map[string]any); e["code"] != "rolled_back" {
		t.Fatalf("priority bystander: %s", r.raw)
	}

	// All valid: 200, every job stored.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+job(a)+`,`+job(b)+`]}`)
	wantCounts(t, r, 200, map[string]float64{"total": 2, "succeeded": 2, "failed": 0})
	for _, id := range []string{a, b} {
		if st := jobState(t, s, id); st != "available" {
			t.Fatalf("job %s: state %q", id, st)
		}
	}

	// A store refusal (an id taken) rolls back the whole batch.
	c := uuidv7.New()
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+job(c)+`,`+job(a)+`]}`)
	wantCounts(t, r, 422, map[string]float64{"succeeded": 0, "failed": 2})
	for _, it := range bulkItems(t, r, 2) {
		if e := it["error"].(map[string]any); it["status"] != "failed" || !strings.Contains(e["message"].(string), "rolled back") {
			t.Fatalf("item %v", it)
		}
	}
	if st := jobState(t, s, c); st != "" {
		t.Fatalf("rolled back job %s exists in state %s", c, st)
	}
}

// TestBulkEnqueueAtomicClientRefusal: a job the client refuses (args over MaxArgsBytes, which
// envelope decoding does not check) is named as the culprit of the atomic batch.
func TestBulkEnqueueAtomicClientRefusal(t *testing.T) {
	client, err := pronto.NewClient(memory.New(), &pronto.Config{MaxArgsBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	small, big := `{"type":"bulk.test","args":[1]}`, `{"type":"bulk.test","args":["far too long for the limit"]}`
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+small+`,`+big+`,`+small+`]}`)
	wantCounts(t, r, 422, map[string]float64{"total": 3, "succeeded": 0, "failed": 3})
	items := bulkItems(t, r, 3)
	for i, want := range []string{"rolled_back", CodeInvalidRequest, "rolled_back"} {
		if e := items[i]["error"].(map[string]any); e["code"] != want {
			t.Fatalf("item %d: %v, want code %s", i, items[i], want)
		}
	}
	if msg := items[1]["error"].(map[string]any)["message"].(string); !strings.HasPrefix(msg, `kind "bulk.test": args are`) {
		t.Fatalf("culprit message %q", msg)
	}
	// A batch of one: its job is the culprit.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[`+big+`]}`)
	if e := bulkItems(t, r, 1)[0]["error"].(map[string]any); r.status != 422 || !strings.HasPrefix(e["message"].(string), `kind "bulk.test": args are`) {
		t.Fatalf("single culprit: %d %s", r.status, r.raw)
	}
	// Partial mode stores the others.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[`+small+`,`+big+`]}`)
	wantCounts(t, r, 207, map[string]float64{"total": 2, "succeeded": 1, "failed": 1})
}

func TestBulkCancel(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	avail := enqueueIn(t, s, "a", "")
	completed, _ := finished(t, s)
	unknown := uuidv7.New()
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"job_ids":["`+avail+`","`+completed+`","`+unknown+`"]}`)
	wantCounts(t, r, 207, map[string]float64{"total_matched": 3, "cancelled": 1, "skipped": 2})
	items := bulkItems(t, r, 3)
	if items[0]["job_id"] != avail || items[0]["status"] != "cancelled" || items[0]["state"] != "cancelled" {
		t.Fatalf("item 0: %v", items[0])
	}
	if items[1]["status"] != "skipped" || items[1]["current_state"] != "completed" || items[1]["reason"] == "" {
		t.Fatalf("item 1: %v", items[1])
	}
	if items[2]["status"] != "skipped" || items[2]["reason"] != "job not found" {
		t.Fatalf("item 2: %v", items[2])
	}
	// Every item refused: 422.
	wantCounts(t, call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"job_ids":["`+completed+`"]}`), 422,
		map[string]float64{"total_matched": 1, "cancelled": 0, "skipped": 1})

	// By filter: the default states (available, scheduled, retryable) of one queue and type.
	a1, a2 := enqueueIn(t, s, "f", ""), enqueueIn(t, s, "f", `,"priority":5`)
	later := enqueueIn(t, s, "f", `,"delay_until":"2099-01-01T00:00:00Z"`)
	other := enqueueIn(t, s, "g", "")
	if st := jobState(t, s, later); st != "scheduled" {
		t.Fatalf("delayed job: %s", st)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"f","priority":5}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "cancelled": 1, "skipped": 0})
	if bulkItems(t, r, 1)[0]["job_id"] != a2 {
		t.Fatalf("priority filter: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"f","type":"bulk.test"}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 2, "cancelled": 2, "skipped": 0})
	for id, want := range map[string]string{a1: "cancelled", later: "cancelled", other: "available"} {
		if st := jobState(t, s, id); st != want {
			t.Fatalf("job %s: %s, want %s", id, st, want)
		}
	}
	// Nothing left to match: 200 with no items.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"queue":"f"}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 0, "cancelled": 0})
	bulkItems(t, r, 0)

	// An empty filter would match every job of every queue: refused, and nothing changes...
	for _, body := range []string{`{"filter":{}}`, `{"filter":{"queue":null,"type":null}}`} {
		checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", body), 400, CodeInvalidRequest)
	}
	if st := jobState(t, s, other); st != "available" {
		t.Fatalf("an empty filter changed job %s: %s", other, st)
	}
	// ...unless it says it means every job.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/cancel", `{"filter":{"all":true}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "cancelled": 1})
	if st := jobState(t, s, other); st != "cancelled" {
		t.Fatalf("all: true left job %s %s", other, st)
	}
}

func TestBulkRetryAndDelete(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	completed, discarded := finished(t, s)
	avail := enqueueIn(t, s, "a", "")

	r := call(t, s, "POST", "/ojs/v1/jobs/bulk/retry", `{"job_ids":["`+completed+`","`+discarded+`"]}`)
	wantCounts(t, r, 207, map[string]float64{"total_matched": 2, "retried": 1, "skipped": 1})
	items := bulkItems(t, r, 2)
	if items[0]["status"] != "skipped" || items[1]["status"] != "retried" || items[1]["state"] != "available" {
		t.Fatalf("retry items: %s", r.raw)
	}

	// The retried job is discarded again, then retried by filter (default state: discarded).
	if got := fetchOne(t, s, "done"); got["id"] != discarded {
		t.Fatalf("fetched %v, want the retried job", got["id"])
	}
	call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+discarded+`","worker_id":"w","error":{"message":"again","retryable":false}}`)
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/retry", `{"filter":{"queue":"done"}}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "retried": 1})
	if bulkItems(t, r, 1)[0]["job_id"] != discarded {
		t.Fatalf("retry by filter: %s", r.raw)
	}

	// Delete: terminal jobs only; an available job is skipped and kept.
	cancelled := enqueueIn(t, s, "a", "")
	call(t, s, "DELETE", "/ojs/v1/jobs/"+cancelled, nil)
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/delete", `{"job_ids":["`+completed+`","`+avail+`","`+cancelled+`"]}`)
	wantCounts(t, r, 207, map[string]float64{"total_matched": 3, "deleted": 2, "skipped": 1})
	items = bulkItems(t, r, 3)
	if items[1]["status"] != "skipped" || items[1]["current_state"] != "available" {
		t.Fatalf("delete of an available job: %v", items[1])
	}
	for id, want := range map[string]string{completed: "", cancelled: "", avail: "available"} {
		if st := jobState(t, s, id); st != want {
			t.Fatalf("job %s: %q, want %q", id, st, want)
		}
	}
	// By filter, with an explicit state: a match that is not terminal is skipped, not deleted.
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/delete", `{"filter":{"state":["available"],"queue":"a"}}`)
	wantCounts(t, r, 422, map[string]float64{"total_matched": 1, "deleted": 0, "skipped": 1})
}

func TestBulkBadRequests(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := uuidv7.New()
	many := make([]string, maxBulkItems+1)
	for i := range many {
		many[i] = `"` + id + `"`
	}
	manyJobs := make([]string, maxBulkItems+1)
	for i := range manyJobs {
		manyJobs[i] = `{"type":"a","args":[]}`
	}
	for _, tc := range []struct {
		path, body string
		status     int
		field      string
	}{
		{"cancel", `{"job_ids":[`, 400, ""},
		{"cancel", `[]`, 400, ""},
		{"cancel", `{}`, 400, "job_ids"},
		{"retry", `{"job_ids":["` + id + `"],"filter":{}}`, 400, "filter"},
		{"delete", `{"job_ids":[]}`, 400, "job_ids"},
		{"delete", `{"job_ids":"` + id + `"}`, 400, "job_ids"},
		{"cancel", `{"job_ids":["` + id + `","nope"]}`, 400, "job_ids[1]"},
		{"cancel", `{"job_ids":[` + strings.Join(many, ",") + `]}`, 413, "job_ids"},
		{"cancel", `{"job_ids":["` + id + `"],"atomicity":"atomic"}`, 400, "atomicity"},
		{"retry", `{"job_ids":["` + id + `"],"atomicity":"all"}`, 400, "atomicity"},
		{"cancel", `{"job_ids":["` + id + `"],"idempotency_key":"k"}`, 400, "idempotency_key"},
		{"cancel", `{"filter":[]}`, 400, "filter"},
		{"cancel", `{"filter":{"state":["running"]}}`, 400, "filter.state"},
		{"cancel", `{"filter":{"queue":"Bad Queue"}}`, 400, "filter.queue"},
		{"cancel", `{"filter":{"type":"Bad"}}`, 400, "filter.type"},
		{"cancel", `{"filter":{"priority":"urgent"}}`, 400, "filter.priority"},
		{"delete", `{"filter":{"enqueued_before":"2026-01-01T00:00:00Z"}}`, 400, "filter.enqueued_before"},
		{"delete", `{"filter":{"colour":"red"}}`, 400, "filter.colour"},
		{"cancel", `{"filter":{}}`, 400, "filter"},
		{"cancel", `{"filter":{"queue":null}}`, 400, "filter"},
		{"retry", `{"filter":{"type":null,"queue":null,"state":null,"priority":null}}`, 400, "filter"},
		{"delete", `{"filter":{"all":false}}`, 400, "filter"},
		{"delete", `{"filter":{"all":"yes"}}`, 400, "filter.all"},
		{"", `{}`, 400, "jobs"},
		{"", `{"jobs":[]}`, 400, "jobs"},
		{"", `{"jobs":[{"type":"a","args":[]}],"atomicity":1}`, 400, "atomicity"},
		{"", `{"jobs":[` + strings.Join(manyJobs, ",") + `]}`, 413, "jobs"},
	} {
		path := "/ojs/v1/jobs/bulk"
		if tc.path != "" {
			path += "/" + tc.path
		}
		r := call(t, s, "POST", path, tc.body)
		name := fmt.Sprintf("%s %.60s", path, tc.body)
		if r.status != tc.status || errField(r) != tc.field {
			t.Fatalf("%s: %d field %q, want %d field %q: %s", name, r.status, errField(r), tc.status, tc.field, r.raw)
		}
		checkErrorBody(t, r, tc.status, "")
	}
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[{"type":"a","args":[]}]}`, "Idempotency-Key", "k"), 400, CodeInvalidRequest)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/bulk/cancel", nil), 405, CodeMethodNotAllowed)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/bulk", nil), 405, CodeMethodNotAllowed)
	checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs/bulk/purge", `{}`), 404, CodeNotFound)
}

// TestBulkDeleteWaitedStep: a finished workflow step that a pending step still waits for is
// skipped by bulk delete, and the item says why (deleting it would leave the waiting step pending
// for good); once the workflow is cancelled it is deleted.
func TestBulkDeleteWaitedStep(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{"name":"w","steps":[
		{"id":"a","type":"t.a","args":[],"options":{"queue":"wfd"}},
		{"id":"b","type":"t.b","args":[],"options":{"queue":"wfd-slow"}},
		{"id":"c","type":"t.c","args":[],"depends_on":["a","b"],"options":{"queue":"wfd"}}]}`)
	wf := obj(t, r, "workflow")
	a := fetchOne(t, s, "wfd")
	if a["type"] != "t.a" {
		t.Fatalf("fetched %v, want step a", a)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+a["id"].(string)+`"}`)
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/delete", `{"job_ids":["`+a["id"].(string)+`"]}`)
	wantCounts(t, r, 422, map[string]float64{"total_matched": 1, "deleted": 0, "skipped": 1})
	item := bulkItems(t, r, 1)[0]
	if reason, _ := item["reason"].(string); item["current_state"] != "completed" || !strings.Contains(reason, "waits for it") {
		t.Fatalf("skipped item: %v", item)
	}
	if st := jobState(t, s, a["id"].(string)); st != "completed" {
		t.Fatalf("step a: %q, want completed (kept)", st)
	}
	mustCall(t, s, 200, "DELETE", "/ojs/v1/workflows/"+wf["id"].(string), nil)
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk/delete", `{"job_ids":["`+a["id"].(string)+`"]}`)
	wantCounts(t, r, 200, map[string]float64{"total_matched": 1, "deleted": 1})
}

// discardedJobs makes n discarded jobs of queue directly in st: inserted, claimed and failed for good.
func discardedJobs(t *testing.T, st store.Store, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "bulk.many", Queue: queue, Args: json.RawMessage(`[1]`),
			State: store.StateAvailable, MaxAttempts: 1}
	}
	if _, err := st.Insert(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		cl, err := st.Claim(ctx, store.ClaimParams{Queue: queue, Kinds: []string{"bulk.many"}, Limit: 500, WorkerID: "w", LeaseDuration: time.Hour})
		if err != nil || len(cl) == 0 {
			t.Fatalf("claimed %d jobs: %v", len(cl), err)
		}
		cs := make([]store.Completion, len(cl))
		for i, a := range cl {
			cs[i] = store.Completion{ID: a.ID, Attempt: a.Attempt, Token: a.ClaimToken, State: store.StateDiscarded,
				Error: &store.AttemptError{Attempt: a.Attempt, At: time.Now(), Type: "Boom", Message: "boom"}}
		}
		if _, err := st.Finish(ctx, cs); err != nil {
			t.Fatal(err)
		}
		done += len(cl)
	}
}

// TestBulkByFilterOverMaxBulkIDs: the endpoints that act on every job a filter matches (up to 10,000:
// POST /ojs/v1/dead-letter/retry and /ojs/v1/admin/jobs/bulk/{retry,cancel,delete}, and the admin
// ones on as many ids) act on more jobs than one Client bulk call takes (pronto.MaxBulkIDs), in
// chunks, and answer the counts of them all.
func TestBulkByFilterOverMaxBulkIDs(t *testing.T) {
	st := openStore(t, "memory")
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	n := pronto.MaxBulkIDs + 1
	count := func(state pronto.State) int {
		t.Helper()
		page, err := client.JobList(context.Background(), &pronto.JobListParams{Queues: []string{"many"}, States: []pronto.State{state}, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Jobs)
	}
	all := map[string]float64{"matched": float64(n), "succeeded": float64(n), "failed": 0}

	discardedJobs(t, st, "many", n)
	r := call(t, s, "POST", "/ojs/v1/dead-letter/retry", `{"filter":{"queue":"many"},"confirm":true}`)
	wantCounts(t, r, 200, all)
	if _, ok := r.body["stopped"]; ok || count(pronto.StateDiscarded) != 0 {
		t.Fatalf("dead-letter retry of %d jobs left %d discarded: %s", n, count(pronto.StateDiscarded), r.raw)
	}

	r = call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/cancel", `{"filter":{"queue":"many","state":"available"},"confirm":true}`)
	wantCounts(t, r, 200, all)
	r = call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/retry", `{"filter":{"queue":"many","state":"cancelled"},"confirm":true}`)
	wantCounts(t, r, 200, all)
	if count(pronto.StateAvailable) != n {
		t.Fatalf("admin bulk retry of %d jobs: %d available", n, count(pronto.StateAvailable))
	}
	page, err := client.JobList(context.Background(), &pronto.JobListParams{Queues: []string{"many"}, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, n+1)
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	ids = append(ids, uuidv7.New()) // unknown: one failure among them
	raw, _ := json.Marshal(map[string]any{"ids": ids})
	r = call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/cancel", raw)
	wantCounts(t, r, 200, map[string]float64{"matched": float64(n + 1), "succeeded": float64(n), "failed": 1})
	r = call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/delete", `{"filter":{"queue":"many","state":"cancelled"},"confirm":true}`)
	wantCounts(t, r, 200, all)
	if count(pronto.StateCancelled) != 0 {
		t.Fatalf("admin bulk delete of %d jobs left %d", n, count(pronto.StateCancelled))
	}
}

// TestBulkChunkedStops: a chunk that fails as a whole (the request ended midway) stops the chunks
// after it; the answer keeps the counts of what was done and says why it stopped and how many of
// the matched jobs were not attempted.
func TestBulkChunkedStops(t *testing.T) {
	ids := make([]string, 2*pronto.MaxBulkIDs+5)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	var calls []int
	stop := errors.New("context canceled")
	res, err := bulkChunked(context.Background(), ids, func(_ context.Context, chunk []string) ([]pronto.BulkResult, error) {
		calls = append(calls, len(chunk))
		out := make([]pronto.BulkResult, 0, len(chunk))
		for _, id := range chunk {
			if len(calls) == 2 && len(out) == 10 {
				return out, stop // the results so far come with the error, as from Client bulk methods
			}
			out = append(out, pronto.BulkResult{ID: id})
		}
		return out, nil
	})
	if !errors.Is(err, stop) || len(res) != pronto.MaxBulkIDs+10 || res[len(res)-1].ID != ids[len(res)-1] {
		t.Fatalf("%d results, err %v; want %d and the stop", len(res), err, pronto.MaxBulkIDs+10)
	}
	if len(calls) != 2 || calls[0] != pronto.MaxBulkIDs {
		t.Fatalf("calls of %v ids, want [%d %d] and no third", calls, pronto.MaxBulkIDs, pronto.MaxBulkIDs)
	}
	resp := map[string]any{}
	bulkStopped(resp, err, len(ids), len(res))
	if resp["stopped"] != "context canceled" || resp["not_attempted"] != len(ids)-len(res) {
		t.Fatalf("answer %v", resp)
	}
	bulkStopped(resp, nil, 1, 1)
	if len(resp) != 2 {
		t.Fatalf("a complete run added %v", resp)
	}
}
