package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// These tests send the exact request bytes the official OJS Go SDK (github.com/openjobspec/ojs-go-sdk)
// sends, with its headers, and decode the answers into the shapes the SDK decodes them into, with
// encoding/json as it does: a field of the wrong JSON type fails the test as it fails the SDK.

// sdkCall sends body with the SDK's headers (Content-Type and Accept application/openjobspec+json,
// OJS-Version 1.0) and decodes a 2xx answer into out.
func sdkCall(t *testing.T, h http.Handler, method, path, body string, wantStatus int, out any) []byte {
	t.Helper()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/openjobspec+json")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	req.Header.Set("Accept", "application/openjobspec+json")
	req.Header.Set("OJS-Version", "1.0")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, wantStatus, rec.Body.Bytes())
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: the SDK cannot decode the answer: %v: %s", method, path, err, rec.Body.Bytes())
		}
	}
	return rec.Body.Bytes()
}

// sdkJob is the part of the SDK's Job the tests read.
type sdkJob struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	State string `json:"state"`
}

func TestSDKManifest(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	var m struct {
		OJSVersion       string            `json:"ojs_version"`
		ConformanceLevel int               `json:"conformance_level"`
		Capabilities     map[string]bool   `json:"capabilities"`
		Extensions       []string          `json:"extensions"`
		Endpoints        map[string]string `json:"endpoints"`
	}
	sdkCall(t, s, "GET", "/ojs/manifest", "", 200, &m)
	if !m.Capabilities["unique_jobs"] || !m.Capabilities["workflows"] || m.ConformanceLevel != 4 {
		t.Fatalf("manifest: %+v", m)
	}
}

func TestSDKWorkflowDAG(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	type step struct {
		ID          string         `json:"id"`
		Type        string         `json:"type"`
		State       string         `json:"state"`
		JobID       *string        `json:"job_id"`
		DependsOn   []string       `json:"depends_on"`
		StartedAt   *time.Time     `json:"started_at,omitempty"`
		CompletedAt *time.Time     `json:"completed_at,omitempty"`
		Result      map[string]any `json:"result,omitempty"`
	}
	var resp struct {
		Workflow struct {
			ID        string     `json:"id"`
			Name      string     `json:"name"`
			State     string     `json:"state"`
			CreatedAt *time.Time `json:"created_at,omitempty"`
			Steps     []step     `json:"steps,omitempty"`
		} `json:"workflow"`
	}
	// CreateWorkflow(Chain(...)) in the SDK's id/depends_on form (the binding's §14.1).
	body := `{"name":"onboarding","steps":[{"id":"step-0","type":"user.create","args":[{"email":"a@example.com"}],"depends_on":[]},{"id":"step-1","type":"email.send","args":[{"to":"a@example.com"}],"depends_on":["step-0"]}],"options":{"queue":"onboard"}}`
	sdkCall(t, s, "POST", "/ojs/v1/workflows", body, 201, &resp)
	wf := resp.Workflow
	if wf.ID == "" || wf.Name != "onboarding" || wf.State != "running" || len(wf.Steps) != 2 {
		t.Fatalf("created: %+v", wf)
	}
	if wf.Steps[0].ID != "step-0" || wf.Steps[0].State != "available" || wf.Steps[0].JobID == nil ||
		wf.Steps[1].ID != "step-1" || wf.Steps[1].State != "pending" || len(wf.Steps[1].DependsOn) != 1 || wf.Steps[1].DependsOn[0] != "step-0" {
		t.Fatalf("steps: %+v", wf.Steps)
	}

	// A worker runs step-0 with a result: GET shows it completed, with the result, and step-1 released.
	var fetched struct {
		Jobs []sdkJob `json:"jobs"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["onboard"],"count":1,"worker_id":"worker_h_1_1"}`, 200, &fetched)
	if len(fetched.Jobs) != 1 || fetched.Jobs[0].ID != *wf.Steps[0].JobID {
		t.Fatalf("fetched %+v, want step-0's job", fetched.Jobs)
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+fetched.Jobs[0].ID+`","result":{"user_id":42}}`, 200, nil)
	sdkCall(t, s, "GET", "/ojs/v1/workflows/"+wf.ID, "", 200, &resp)
	got := resp.Workflow.Steps
	if len(got) != 2 || got[0].State != "completed" || got[0].Result["user_id"] != 42.0 || got[0].CompletedAt == nil ||
		got[1].State != "available" || got[1].DependsOn[0] != "step-0" {
		t.Fatalf("after step-0: %+v", got)
	}

	// Mistakes in the binding's form are named.
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"name":"x","steps":[{"id":"a","type":"a.b","args":[],"depends_on":["b"]}]}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if !strings.Contains(string(r.raw), "steps[0].depends_on") {
		t.Fatalf("error does not name the field: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/workflows", `{"name":"x","steps":[{"id":"a","type":"a.b","args":[],"depends_on":[]},{"type":"a.b","args":[],"depends_on":["a"]}]}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if !strings.Contains(string(r.raw), "steps[1].id") {
		t.Fatalf("error does not name the field: %s", r.raw)
	}
}

func TestSDKWorkflowTypedHasSteps(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	var resp struct {
		Workflow struct {
			Steps []struct {
				ID        string   `json:"id"`
				DependsOn []string `json:"depends_on"`
			} `json:"steps"`
		} `json:"workflow"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"c","steps":[{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`, 201, &resp)
	st := resp.Workflow.Steps
	if len(st) != 2 || st[0].ID != "0" || st[1].ID != "1" || len(st[1].DependsOn) != 1 || st[1].DependsOn[0] != "0" {
		t.Fatalf("chain steps: %+v", st)
	}
}

func TestSDKCronJob(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	type cronJob struct {
		Name      string         `json:"name"`
		Cron      string         `json:"cron"`
		Timezone  string         `json:"timezone"`
		Type      string         `json:"type"`
		Args      []any          `json:"args"`
		Options   map[string]any `json:"options,omitempty"`
		Meta      map[string]any `json:"meta,omitempty"`
		Status    string         `json:"status"`
		LastRunAt *time.Time     `json:"last_run_at,omitempty"`
		NextRunAt *time.Time     `json:"next_run_at,omitempty"`
		CreatedAt *time.Time     `json:"created_at,omitempty"`
	}
	var resp struct {
		CronJob cronJob `json:"cron_job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/cron", `{"name":"nightly","cron":"0 3 * * *","type":"report.run","args":[{"kind":"daily"}],"options":{"queue":"reports"}}`, 201, &resp)
	c := resp.CronJob
	if c.Name != "nightly" || c.Cron != "0 3 * * *" || c.Type != "report.run" || len(c.Args) != 1 ||
		c.Options["queue"] != "reports" || c.Status != "active" || c.NextRunAt == nil {
		t.Fatalf("register: %+v", c)
	}
	resp.CronJob = cronJob{}
	sdkCall(t, s, "GET", "/ojs/v1/cron/nightly", "", 200, &resp)
	if resp.CronJob.Name != "nightly" || resp.CronJob.Type != "report.run" {
		t.Fatalf("get: %+v", resp.CronJob)
	}
	resp.CronJob = cronJob{}
	sdkCall(t, s, "DELETE", "/ojs/v1/cron/nightly", "", 200, &resp)
	if resp.CronJob.Name != "nightly" {
		t.Fatalf("delete: %+v", resp.CronJob)
	}
	// The older "cron" key and job_template stay for clients that read them.
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"n2","cron":"0 3 * * *","type":"report.run","args":[]}`)
	if obj(t, r, "cron")["name"] != "n2" || obj(t, r, "cron")["job_template"].(map[string]any)["type"] != "report.run" {
		t.Fatalf("cron: %s", r.raw)
	}
}

func TestSDKHeartbeatCount(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	var job struct {
		Job sdkJob `json:"job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"visibility_timeout_ms":60000}}`, 201, &job)
	var fetched struct {
		Jobs []sdkJob `json:"jobs"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"count":1,"worker_id":"worker_h_1_2"}`, 200, &fetched)
	if len(fetched.Jobs) != 1 {
		t.Fatalf("fetched %d jobs", len(fetched.Jobs))
	}
	type hbResp struct {
		State    string   `json:"state"`
		Extended []string `json:"jobs_extended"`
	}
	// The SDK's heartbeat: a count and the ids.
	var hb hbResp
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"worker_h_1_2","state":"running","active_jobs":1,"active_job_ids":["`+job.Job.ID+`"]}`, 200, &hb)
	if hb.State != "running" || len(hb.Extended) != 1 || hb.Extended[0] != job.Job.ID {
		t.Fatalf("heartbeat with ids: %+v", hb)
	}
	// A count alone still extends what this server handed to the worker.
	hb = hbResp{}
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"worker_h_1_2","state":"running","active_jobs":1}`, 200, &hb)
	if len(hb.Extended) != 1 || hb.Extended[0] != job.Job.ID {
		t.Fatalf("heartbeat with a count: %+v", hb)
	}
	// Another worker's count extends nothing of it; a bad count is named.
	hb = hbResp{}
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"other","state":"running","active_jobs":3}`, 200, &hb)
	if len(hb.Extended) != 0 {
		t.Fatalf("another worker's heartbeat extended %v", hb.Extended)
	}
	r := call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"w","active_jobs":-1}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	// pronto's first form (the ids in active_jobs) still works.
	r = call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"worker_h_1_2","active_jobs":["`+job.Job.ID+`"]}`)
	if r.status != 200 || len(r.body["jobs_extended"].([]any)) != 1 {
		t.Fatalf("heartbeat with an id list: %s", r.raw)
	}
}

// TestSDKHeartbeatCountPastFirstLease: the SDK's count-only heartbeats keep a job held past the
// lease its fetch gave (they once extended it only until then, so a job ran at most two
// visibility timeouts before it was taken away from a worker still heartbeating it).
func TestSDKHeartbeatCountPastFirstLease(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	var job struct {
		Job sdkJob `json:"job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, 201, &job)
	const vt = 2 * time.Second
	firstLeaseEnd := time.Now().Add(vt)
	var fetched struct {
		Jobs []sdkJob `json:"jobs"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"count":1,"worker_id":"wk","visibility_timeout_ms":2000}`, 200, &fetched)
	if len(fetched.Jobs) != 1 {
		t.Fatalf("fetched %d jobs", len(fetched.Jobs))
	}
	// Heartbeat as the SDK does, more often than the lease, until well past the first lease's end.
	for beats := 0; ; beats++ {
		var hb struct {
			Extended []string `json:"jobs_extended"`
		}
		sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wk","state":"running","active_jobs":1,"visibility_timeout_ms":2000}`, 200, &hb)
		if len(hb.Extended) != 1 || hb.Extended[0] != job.Job.ID {
			t.Fatalf("heartbeat %d (%v after the first lease's end) extended %v, want the held job",
				beats, time.Since(firstLeaseEnd).Round(time.Millisecond), hb.Extended)
		}
		if time.Now().After(firstLeaseEnd.Add(vt / 2)) {
			break
		}
		time.Sleep(vt / 8)
	}
	r := call(t, s, "GET", "/ojs/v1/jobs/"+job.Job.ID, "")
	if st := obj(t, r, "job")["state"]; st != "active" {
		t.Fatalf("job state %v after the heartbeats, want active: %s", st, r.raw)
	}
}

// TestSDKHeartbeatCountAfterRefusedAck: an ack the server refuses without deciding the job (its
// result is unstorable) leaves the job with its worker, so count-only heartbeats still renew it;
// once acked, they renew nothing.
func TestSDKHeartbeatCountAfterRefusedAck(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	var job struct {
		Job sdkJob `json:"job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, 201, &job)
	var fetched struct {
		Jobs []sdkJob `json:"jobs"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"count":1,"worker_id":"wk"}`, 200, &fetched)
	if len(fetched.Jobs) != 1 {
		t.Fatalf("fetched %d jobs", len(fetched.Jobs))
	}
	r := call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+job.Job.ID+`","worker_id":"wk","result":{"a":"x\u0000y"}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	type hbResp struct {
		Extended []string `json:"jobs_extended"`
	}
	var hb hbResp
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wk","state":"running","active_jobs":1}`, 200, &hb)
	if len(hb.Extended) != 1 || hb.Extended[0] != job.Job.ID {
		t.Fatalf("after a refused ack, the count-only heartbeat extended %v, want the job", hb.Extended)
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+job.Job.ID+`","worker_id":"wk","result":1}`, 200, nil)
	hb = hbResp{}
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wk","state":"running","active_jobs":1}`, 200, &hb)
	if len(hb.Extended) != 0 {
		t.Fatalf("after the ack, the heartbeat extended %v", hb.Extended)
	}
	if n := len(s.fetched.jobs); n != 0 {
		t.Fatalf("%d jobs still remembered after the ack", n)
	}
}

func TestSDKUniqueKeyPeriodMS(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	// WithUnique(UniquePolicy{Key: []string{"to"}, Period: time.Minute}).
	body := func(to string) string {
		return `{"type":"email.send","args":[{"to":"` + to + `","subject":"hi"}],"options":{"unique":{"key":["to"],"period_ms":60000}}}`
	}
	var job struct {
		Job sdkJob `json:"job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", body("a@example.com"), 201, &job)
	r := call(t, s, "POST", "/ojs/v1/jobs", body("a@example.com"))
	checkErrorBody(t, r, 409, CodeDuplicate)
	sdkCall(t, s, "POST", "/ojs/v1/jobs", body("b@example.com"), 201, &job)
	// The SDK's form and the spec's at once is ambiguous, and refused.
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[{"to":1}],"options":{"unique":{"key":["to"],"keys":["type"]}}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"unique":{"period":"PT1M","period_ms":60000}}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"unique":{"period_ms":0}}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
}

func TestSDKQueueStats(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for range 2 {
		sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"email"}}`, 201, nil)
	}
	var resp struct {
		Queue  string `json:"queue"`
		Status string `json:"status"`
		Stats  struct {
			Available int `json:"available"`
			Active    int `json:"active"`
			Scheduled int `json:"scheduled"`
			Retryable int `json:"retryable"`
			Discarded int `json:"discarded"`
		} `json:"stats"`
		ComputedAt string `json:"computed_at"`
	}
	sdkCall(t, s, "GET", "/ojs/v1/queues/email/stats", "", 200, &resp)
	if resp.Queue != "email" || resp.Status != "active" || resp.Stats.Available != 2 || resp.ComputedAt == "" {
		t.Fatalf("stats: %+v", resp)
	}
	// Without OJS-Version (as the conformance cases ask), the level-4 shape.
	r := call(t, s, "GET", "/ojs/v1/queues/email/stats", nil, "Accept", "application/openjobspec+json")
	if q := obj(t, r, "queue"); q["name"] != "email" || q["available"] != 2.0 {
		t.Fatalf("level-4 stats: %s", r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/queues/email/stats?format=binding", nil)
	if r.body["queue"] != "email" || obj(t, r, "stats")["available"] != 2.0 {
		t.Fatalf("?format=binding: %s", r.raw)
	}
}

func TestSDKSchemaRegistry(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	type schema struct {
		URI       string    `json:"uri"`
		Type      string    `json:"type"`
		Version   string    `json:"version"`
		CreatedAt time.Time `json:"created_at"`
	}
	var reg struct {
		Schema schema `json:"schema"`
	}
	// RegisterSchema(SchemaDefinition{...}): the SDK sends the version as a string.
	doc := `{"type":"array","prefixItems":[{"type":"object","properties":{"to":{"type":"string","format":"email"},"n":{"type":"integer","minimum":1}},"required":["to"]}],"minItems":1}`
	sdkCall(t, s, "POST", "/ojs/v1/schemas", `{"uri":"urn:ojs:schema:email.send:v1","type":"email.send","version":"1","schema":`+doc+`}`, 201, &reg)
	if reg.Schema.URI != "urn:ojs:schema:email.send:v1" || reg.Schema.Type != "email.send" || reg.Schema.Version != "1" || reg.Schema.CreatedAt.IsZero() {
		t.Fatalf("register: %+v", reg.Schema)
	}
	r := call(t, s, "POST", "/ojs/v1/schemas", `{"uri":"urn:ojs:schema:email.send:v1","type":"email.send","version":"1","schema":{}}`)
	checkErrorBody(t, r, 409, CodeDuplicate)

	var list struct {
		Schemas    []schema `json:"schemas"`
		Pagination struct {
			Total   int  `json:"total"`
			HasMore bool `json:"has_more"`
		} `json:"pagination"`
	}
	sdkCall(t, s, "GET", "/ojs/v1/schemas", "", 200, &list)
	if len(list.Schemas) != 1 || list.Pagination.Total != 1 || list.Schemas[0].Version != "1" {
		t.Fatalf("list: %+v", list)
	}
	var got struct {
		Schema struct {
			URI    string          `json:"uri"`
			Schema json.RawMessage `json:"schema"`
		} `json:"schema"`
	}
	sdkCall(t, s, "GET", "/ojs/v1/schemas/urn%3Aojs%3Aschema%3Aemail.send%3Av1", "", 200, &got)
	if string(got.Schema.Schema) != doc {
		t.Fatalf("get: %s", got.Schema.Schema)
	}
	if r := call(t, s, "GET", "/ojs/manifest", nil); obj(t, r, "capabilities")["schema_validation"] != true {
		t.Fatalf("manifest: %s", r.raw)
	}

	// Enqueue validates args against the type's schema.
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"to":"a@example.com","n":2}]}`, 201, nil)
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"to":"a@example.com","n":0}]}`)
	checkErrorBody(t, r, 422, CodeSchemaValidationFailed)
	if d := obj(t, r, "error")["details"].(map[string]any); d["field"] != "args[0].n" || d["schema"] != "urn:ojs:schema:email.send:v1" {
		t.Fatalf("details: %s", r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"n":1}]}`)
	checkErrorBody(t, r, 422, CodeSchemaValidationFailed)
	r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"email.send","args":[{"to":"a@example.com"}]},{"type":"email.send","args":[]}]}`)
	checkErrorBody(t, r, 422, CodeSchemaValidationFailed)
	if f := obj(t, r, "error")["details"].(map[string]any)["field"]; f != "jobs[1].args" {
		t.Fatalf("batch field %v: %s", f, r.raw)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[{"type":"email.send","args":[{"to":"a@example.com"}]},{"type":"email.send","args":[{"to":1}]}]}`)
	if items := r.body["items"].([]any); r.status != 207 || items[1].(map[string]any)["error"].(map[string]any)["code"] != CodeSchemaValidationFailed {
		t.Fatalf("bulk: %s", r.raw)
	}
	// A job naming a schema (the envelope's schema, as the SDK sends it) is checked against that one.
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[],"schema":"urn:nope"}`)
	checkErrorBody(t, r, 422, "")
	// Other types are not checked.
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"other.kind","args":[1,2,3]}`, 201, nil)

	// A number version is answered as a number; a URI holding "/" is reached URL-encoded.
	r = call(t, s, "POST", "/ojs/v1/schemas", `{"uri":"https://example.com/s/a.json","type":"a.b","version":2,"schema":{"type":"array"}}`)
	if r.status != 201 || obj(t, r, "schema")["version"] != 2.0 {
		t.Fatalf("number version: %s", r.raw)
	}
	if r := call(t, s, "GET", "/ojs/v1/schemas/https%3A%2F%2Fexample.com%2Fs%2Fa.json", nil); r.status != 200 {
		t.Fatalf("uri with slashes: %s", r.raw)
	}
	// Bad schemas are refused with the reason; no document may load another.
	for _, bad := range []string{
		`{"uri":"u:1","type":"a.b","version":1,"schema":{"type":"nonsense"}}`,
		`{"uri":"u:2","type":"a.b","version":1,"schema":{"$ref":"file:///etc/passwd"}}`,
		`{"uri":"u:3","type":"a.b","version":1,"schema":[]}`,
		`{"uri":"u:4","type":"Bad","version":1,"schema":{}}`,
		`{"uri":"u:5","type":"a.b","version":{},"schema":{}}`,
		`{"type":"a.b","version":1,"schema":{}}`,
	} {
		r := call(t, s, "POST", "/ojs/v1/schemas", bad)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
	}

	// DeleteSchema: the type is no longer checked.
	var del struct {
		Deleted bool   `json:"deleted"`
		URI     string `json:"uri"`
	}
	sdkCall(t, s, "DELETE", "/ojs/v1/schemas/urn%3Aojs%3Aschema%3Aemail.send%3Av1", "", 200, &del)
	if !del.Deleted || del.URI != "urn:ojs:schema:email.send:v1" {
		t.Fatalf("delete: %+v", del)
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"email.send","args":[{"n":0}]}`, 201, nil)
	r = call(t, s, "GET", "/ojs/v1/schemas/urn%3Aojs%3Aschema%3Aemail.send%3Av1", nil)
	checkErrorBody(t, r, 404, CodeNotFound)
}

// TestExtensionsDocumented: every extension the manifest lists has its row in docs/http-api.md's
// table of extensions, so that the list and the documentation cannot drift apart.
func TestExtensionsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range extensions {
		if !strings.Contains(string(doc), "| `"+x.name+"` |") {
			t.Errorf("docs/http-api.md has no row for the extension %q", x.name)
		}
	}
}

// getJobFailing is a store whose GetJob fails while fail is set, as a database that went away would.
type getJobFailing struct {
	store.Store
	fail atomic.Bool
}

func (g *getJobFailing) GetJob(ctx context.Context, id string) (*store.Job, error) {
	if g.fail.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	}
	return g.Store.GetJob(ctx, id)
}

// TestHeartbeatDatabaseError: a heartbeat the store cannot answer is a retryable 500 naming the
// backend error, not a jobs_lost list that would make the worker drop jobs it still holds; once the
// store answers again, the same heartbeat extends them.
func TestHeartbeatDatabaseError(t *testing.T) {
	st := &getJobFailing{Store: memory.New()}
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	var job struct {
		Job sdkJob `json:"job"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`, 201, &job)
	sdkCall(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["default"],"count":1,"worker_id":"wk"}`, 200, nil)
	st.fail.Store(true)
	for _, body := range []string{
		`{"worker_id":"wk","state":"running","active_jobs":1}`,
		`{"worker_id":"wk","active_jobs":["` + job.Job.ID + `"]}`,
	} {
		r := call(t, s, "POST", "/ojs/v1/workers/heartbeat", body)
		checkErrorBody(t, r, 500, CodeBackendError)
		if !strings.Contains(string(r.raw), "connection refused") {
			t.Fatalf("the error does not name the backend's: %s", r.raw)
		}
	}
	st.fail.Store(false)
	var hb struct {
		Extended []string `json:"jobs_extended"`
		Lost     []string `json:"jobs_lost"`
	}
	sdkCall(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wk","state":"running","active_jobs":1}`, 200, &hb)
	if len(hb.Extended) != 1 || hb.Extended[0] != job.Job.ID || len(hb.Lost) != 0 {
		t.Fatalf("after the store recovered: extended %v, lost %v", hb.Extended, hb.Lost)
	}
}
