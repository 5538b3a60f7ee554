package server

// Input the OJS OpenAPI document (/work/shared/ojs/spec/openapi.yaml) and the HTTP binding
// (ojs-http-binding.md) define, and how the server answers it: the RetryPolicy's backoff_type, the
// object type of a nack's error.details, and the 409 of a batch whose own jobs share a unique key.

import (
	"encoding/json"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestRetryBackoffTypeIsBackoffStrategy: openapi.yaml RetryPolicy defines backoff_type, and
// backoff_strategy as its alias. Either is accepted; both are too when they agree, and a
// disagreement is a 422 naming the later one, like every other retry policy error.
func TestRetryBackoffTypeIsBackoffStrategy(t *testing.T) {
	s := serverOn(t, "memory")
	for _, retry := range []string{
		`{"max_attempts":3,"backoff_type":"constant"}`,
		`{"max_attempts":3,"backoff_strategy":"constant"}`,
		`{"max_attempts":3,"backoff_type":"constant","backoff_strategy":"constant"}`,
	} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":`+retry+`}}`)
		if r.status != 201 {
			t.Fatalf("enqueue with retry %s: %d %s", retry, r.status, r.raw)
		}
		job, _ := r.body["job"].(map[string]any)
		if got, _ := job["retry"].(map[string]any); got["backoff_strategy"] != "constant" {
			t.Fatalf("retry %s: backoff constant was not kept: %v", retry, got)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":{"backoff_strategy":"linear","backoff_type":"constant"}}}`)
	checkErrorBody(t, r, 422, CodeInvalidRequest)
	if f := errField(r); f != "retry.backoff_type" {
		t.Fatalf("disagreeing aliases: field %q, want retry.backoff_type: %s", f, r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":{"backoff_type":"cubic"}}}`)
	checkErrorBody(t, r, 422, CodeInvalidRequest)
	if f := errField(r); f != "retry.backoff_type" {
		t.Fatalf("unknown backoff_type: field %q, want retry.backoff_type: %s", f, r.raw)
	}
}

// TestNackDetailsMustBeObject: openapi.yaml JobError.details is an object (binding 10.3). A nack
// whose error.details is anything else is refused with 400 naming error.details, and nothing is
// recorded; null is no details. An object is kept and served back.
func TestNackDetailsMustBeObject(t *testing.T) {
	s := startedServer(t, "memory")
	if r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"nack-details"}}`); r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	j := fetchFrom(t, s, "nack-details")
	for _, details := range []string{`"not-an-object"`, `[1]`, `3`, `true`} {
		n := nackFetched(t, s, j, `{"code":"handler_error","message":"m","details":`+details+`}`)
		checkErrorBody(t, n, 400, CodeInvalidRequest)
		if f := errField(n); f != "error.details" {
			t.Fatalf("details %s: field %q, want error.details: %s", details, f, n.raw)
		}
	}
	g := call(t, s, "GET", "/ojs/v1/jobs/"+j["id"].(string), nil)
	if job, _ := g.body["job"].(map[string]any); job["state"] != "active" || job["error"] != nil {
		t.Fatalf("a refused nack changed the job: %s", g.raw)
	}
	if n := nackFetched(t, s, j, `{"code":"handler_error","message":"m","details":null}`); n.status != 200 {
		t.Fatalf("nack with null details: %d %s", n.status, n.raw)
	}
	g = call(t, s, "GET", "/ojs/v1/jobs/"+j["id"].(string), nil)
	job, _ := g.body["job"].(map[string]any)
	if e, _ := job["error"].(map[string]any); e == nil || e["details"] != nil {
		t.Fatalf("null details should show none: %s", g.raw)
	}

	if r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"nack-details-obj"}}`); r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	j = fetchFrom(t, s, "nack-details-obj")
	if n := nackFetched(t, s, j, `{"code":"handler_error","message":"m","details":{"k":"v"}}`); n.status != 200 {
		t.Fatalf("nack with object details: %d %s", n.status, n.raw)
	}
	g = call(t, s, "GET", "/ojs/v1/jobs/"+j["id"].(string), nil)
	job, _ = g.body["job"].(map[string]any)
	e, _ := job["error"].(map[string]any)
	if d, _ := e["details"].(map[string]any); d["k"] != "v" {
		t.Fatalf("object details not served back: %s", g.raw)
	}
}

// TestJobViewShowsOnlyObjectDetails: an error recorded before nacks were checked, whose details
// are not an object, is shown without them rather than breaking clients that decode an object.
func TestJobViewShowsOnlyObjectDetails(t *testing.T) {
	for details, want := range map[string]bool{`"text"`: false, `[1]`: false, `{"k":1}`: true, `null`: false} {
		ae := &pronto.AttemptError{Message: "m", Details: []byte(`{"code":"x","details":` + details + `}`)}
		b := appendAttemptError(nil, ae)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("details %s: %v: %s", details, err, b)
		}
		if _, has := got["details"]; has != want {
			t.Fatalf("details %s: shown %v, want %v: %s", details, has, want, b)
		}
	}
}

// TestBatchUniqueConflictWithinBatch: two jobs of one batch with the same unique key and
// on_conflict reject refuse the batch with 409 duplicate naming both jobs by index
// (details.index, details.existing_job_index, details.field jobs[j]), and no existing_job_id: the
// first job was rolled back with the batch, so there is no job to follow.
func TestBatchUniqueConflictWithinBatch(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			u := `"options":{"queue":"batch-unique","unique":{"keys":["type"],"on_conflict":"reject"}}`
			other := `{"type":"c.d","args":[],"options":{"queue":"batch-unique"}}`
			r := call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[],`+u+`},`+other+`,{"type":"a.b","args":[],`+u+`}]}`)
			checkErrorBody(t, r, 409, CodeDuplicate)
			d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
			if id, has := d["existing_job_id"]; has {
				t.Fatalf("names existing_job_id %v, a job of the rolled back batch: %s", id, r.raw)
			}
			if d["field"] != "jobs[2]" || d["index"] != 2.0 || d["existing_job_index"] != 0.0 {
				t.Fatalf("want field jobs[2], index 2, existing_job_index 0: %s", r.raw)
			}
			// Nothing of the batch holds the key.
			if e := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],`+u+`}`); e.status != 201 {
				t.Fatalf("the refused batch left a holder of the key: %d %s", e.status, e.raw)
			}
		})
	}
}

// TestBatchUniqueConflictWithStoredJob: a batch job refused because a stored job holds its unique
// key still names that job, which the client can read.
func TestBatchUniqueConflictWithStoredJob(t *testing.T) {
	s := serverOn(t, "memory")
	u := `"options":{"queue":"batch-unique-stored","unique":{"keys":["type"],"on_conflict":"reject"}}`
	first := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],`+u+`}`)
	if first.status != 201 {
		t.Fatalf("enqueue: %d %s", first.status, first.raw)
	}
	r := call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"c.d","args":[]},{"type":"a.b","args":[],`+u+`}]}`)
	checkErrorBody(t, r, 409, CodeDuplicate)
	d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	id, _ := d["existing_job_id"].(string)
	if want := first.body["job"].(map[string]any)["id"]; id != want {
		t.Fatalf("existing_job_id %q, want the stored holder %v: %s", id, want, r.raw)
	}
	if g := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil); g.status != 200 {
		t.Fatalf("GET of existing_job_id: %d %s", g.status, g.raw)
	}
}
