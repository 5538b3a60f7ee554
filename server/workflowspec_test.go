package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Workflow behaviours the OJS workflow spec (ojs-workflows.md) and the HTTP binding (§14) ask for:
// nesting, metadata, failure reports, cancellation; and the Go builder's callbacks.

// waitFetchWF fetches one job of queue, waiting for one up to a generous deadline.
func waitFetchWF(t *testing.T, s *Server, queue string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if j := fetchOne(t, s, queue); j != nil {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing to fetch in %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nackForGood fails job j for good (not retryable) with code handler_error, message "boom".
func nackForGood(t *testing.T, s *Server, j map[string]any) {
	t.Helper()
	r := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+j["id"].(string)+`","worker_id":"w","claim_token":"`+j["claim_token"].(string)+`","error":{"code":"handler_error","message":"boom","retryable":false}}`)
	if r.status != 200 {
		t.Fatalf("nack: %d %s", r.status, r.raw)
	}
}

// getWF reads workflow id.
func getWF(t *testing.T, s *Server, id string) map[string]any {
	t.Helper()
	return obj(t, mustCall(t, s, 200, "GET", "/ojs/v1/workflows/"+id, nil), "workflow")
}

// stepTypes lists the types of a workflow view's steps[].
func stepTypes(t *testing.T, wf map[string]any) string {
	t.Helper()
	var types []string
	for _, st := range wf["steps"].([]any) {
		types = append(types, st.(map[string]any)["type"].(string))
	}
	return strings.Join(types, " ")
}

// TestWorkflowNestedKeepsOuterType: a chain, group or batch nesting workflows (ojs-workflows.md §10.1,
// §12.4; the JavaScript SDK's chain(a, group(b, c), d)) keeps its type on POST and GET (conformance
// cases assert $.workflow.type), and GET lists its steps in creation order.
func TestWorkflowNestedKeepsOuterType(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	job := func(kind string) string {
		return `{"type":"` + kind + `","args":[],"options":{"queue":"wfspec-nest"}}`
	}
	for _, tc := range []struct{ typ, body, steps string }{
		{"chain", `{"type":"chain","name":"etl","steps":[` + job("x.a") + `,{"type":"group","jobs":[` + job("x.b") + `,` + job("x.c") + `]},` + job("x.d") + `]}`, "x.a x.b x.c x.d"},
		{"group", `{"type":"group","name":"g","jobs":[` + job("x.a") + `,{"type":"chain","steps":[` + job("x.b") + `,` + job("x.c") + `]}]}`, "x.a x.b x.c"},
		{"batch", `{"type":"batch","name":"b","jobs":[{"type":"chain","steps":[` + job("x.b") + `,` + job("x.c") + `]}],"callbacks":{"on_complete":` + job("x.cb") + `}}`, "x.b x.c x.cb"},
	} {
		r := mustCall(t, s, 201, "POST", "/ojs/v1/workflows", tc.body)
		wf := obj(t, r, "workflow")
		if wf["type"] != tc.typ {
			t.Errorf("created a %s nesting a workflow: type %v, want %s", tc.typ, wf["type"], tc.typ)
		}
		got := getWF(t, s, wf["id"].(string))
		if got["type"] != tc.typ {
			t.Errorf("GET a %s nesting a workflow: type %v, want %s", tc.typ, got["type"], tc.typ)
		}
		if st := stepTypes(t, got); st != tc.steps {
			t.Errorf("GET a %s nesting a workflow: steps %s, want %s", tc.typ, st, tc.steps)
		}
	}
}

// TestWorkflowNestedIgnoresServerSetFields: the spec's own nested example (ojs-workflows.md §10.3,
// §12.4: a chain whose step is {"type": "group", "id": ..., "name": ..., "jobs": [...]}) is accepted:
// a nested workflow's id, like the outermost one's, is a server-set attribute and ignored.
func TestWorkflowNestedIgnoresServerSetFields(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	body := `{
  "type": "chain",
  "id": "wf_019539a4-nested-example",
  "name": "etl-pipeline",
  "steps": [
    {"type": "data.extract", "args": [{"source": "api.example.com/v2/records"}]},
    {
      "type": "group",
      "id": "wf_019539a4-transform-group",
      "name": "parallel-transforms",
      "jobs": [
        { "type": "transform.csv", "args": [] },
        { "type": "transform.parquet", "args": [] },
        { "type": "transform.json", "args": [] }
      ]
    },
    {"type": "data.load", "args": [{"destination": "warehouse"}]}
  ]
}`
	r := call(t, s, "POST", "/ojs/v1/workflows", body)
	if r.status != 201 {
		t.Fatalf("the spec's nested workflow example (§10.3): %d %s", r.status, r.raw)
	}
	if got := stepTypes(t, obj(t, r, "workflow")); got != "data.extract transform.csv transform.parquet transform.json data.load" {
		t.Fatalf("steps %s", got)
	}
}

// TestWorkflowMetadataStartedAt: once a step has started, the workflow's metadata.started_at says
// when (ojs-workflows.md §3.3, §11.2's GET example).
func TestWorkflowMetadataStartedAt(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newStoreServer(t, kind)
			id, _ := createWF(t, s, `{"type":"chain","name":"c","steps":[{"type":"c.a","args":[],"options":{"queue":"wfspec-sa"}},{"type":"c.b","args":[],"options":{"queue":"wfspec-sa"}}]}`)
			if md, _ := getWF(t, s, id)["metadata"].(map[string]any); md["started_at"] != nil {
				t.Fatalf("a workflow no step of which started has metadata.started_at %v", md["started_at"])
			}
			j := waitFetchWF(t, s, "wfspec-sa")
			wf := getWF(t, s, id)
			md, _ := wf["metadata"].(map[string]any)
			at, _ := md["started_at"].(string)
			if at == "" {
				t.Fatalf("a workflow whose first step started (%v) has no metadata.started_at: %v", j["started_at"], wf)
			}
			if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
				t.Fatalf("metadata.started_at %q: %v", at, err)
			}
		})
	}
}

// TestWorkflowCancelAnswerReportsAsGet: DELETE /ojs/v1/workflows/{id} answers the cancelled
// workflow as GET shows it: metadata.started_at of the step that had started, and steps[] with each
// step's state (ojs-http-binding.md §14.2-14.3), not the counts alone.
func TestWorkflowCancelAnswerReportsAsGet(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newStoreServer(t, kind)
			id, ids := createWF(t, s, `{"type":"chain","name":"c","steps":[{"type":"c.a","args":[],"options":{"queue":"wfspec-ca"}},{"type":"c.b","args":[],"options":{"queue":"wfspec-ca"}}]}`)
			waitFetchWF(t, s, "wfspec-ca")
			r := call(t, s, "DELETE", "/ojs/v1/workflows/"+id, "")
			if r.status != 200 {
				t.Fatalf("cancel: %d %s", r.status, r.raw)
			}
			wf := obj(t, r, "workflow")
			if wf["state"] != "cancelled" {
				t.Fatalf("state %v: %s", wf["state"], r.raw)
			}
			md, _ := wf["metadata"].(map[string]any)
			if at, _ := md["started_at"].(string); at == "" {
				t.Errorf("the cancel's answer lacks metadata.started_at of the started step: %s", r.raw)
			}
			steps, _ := wf["steps"].([]any)
			if len(steps) != len(ids) {
				t.Fatalf("the cancel's answer has steps %v, want %d: %s", wf["steps"], len(ids), r.raw)
			}
			for i, st := range steps {
				m := st.(map[string]any)
				if m["job_id"] != ids[i] || m["state"] != "cancelled" {
					t.Errorf("step %d: %v, want job %s cancelled", i, m, ids[i])
				}
			}
		})
	}
}

// TestWorkflowFailureRecorded: a failed chain records which step failed and how (ojs-workflows.md
// §9.2 rule 4, §9.6): failed_step_index, failed_job_ids (the step that failed, not those cancelled
// after it) and errors [{job_id, code, message, attempt}].
func TestWorkflowFailureRecorded(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := newStoreServer(t, kind)
			id, ids := createWF(t, s, `{"type":"chain","name":"c","steps":[{"type":"c.a","args":[],"options":{"queue":"wfspec-fr"}},{"type":"c.b","args":[],"options":{"queue":"wfspec-fr"}},{"type":"c.c","args":[],"options":{"queue":"wfspec-fr"}}]}`)
			ack(t, s, waitFetchWF(t, s, "wfspec-fr")["id"].(string), `1`)
			nackForGood(t, s, waitFetchWF(t, s, "wfspec-fr"))
			wf := getWF(t, s, id)
			if wf["state"] != "failed" {
				t.Fatalf("state %v", wf["state"])
			}
			md, _ := wf["metadata"].(map[string]any)
			if idx, ok := md["failed_step_index"].(float64); !ok || idx != 1 {
				t.Errorf("failed_step_index %v, want 1", md["failed_step_index"])
			}
			if fj, _ := md["failed_job_ids"].([]any); len(fj) != 1 || fj[0] != ids[1] {
				t.Errorf("failed_job_ids %v, want [%s]", md["failed_job_ids"], ids[1])
			}
			errs, _ := md["errors"].([]any)
			if len(errs) != 1 {
				t.Fatalf("errors %v, want the failed step's error; workflow: %v", md["errors"], wf)
			}
			e := errs[0].(map[string]any)
			if e["job_id"] != ids[1] || e["code"] != "handler_error" || e["message"] != "boom" || e["attempt"] != 1.0 {
				t.Errorf("error %v", e)
			}
		})
	}
}

// ackOnReadStore is a store whose GetWorkflow runs hook (once armed) after it read the workflow:
// what happens when a step finishes between the server's read of a workflow and what it does next.
type ackOnReadStore struct {
	store.Store
	mu   sync.Mutex
	hook func()
}

func (s *ackOnReadStore) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	wf, err := s.Store.GetWorkflow(ctx, id)
	s.mu.Lock()
	hook := s.hook
	s.hook = nil
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return wf, err
}

// TestWorkflowCancelRacingCompletionStaysCompleted: when a workflow's last step completes between
// DELETE /ojs/v1/workflows/{id}'s read of the workflow and its cancel, the workflow stays completed
// (ojs-workflows.md §8.2: completed is terminal) and the DELETE answers 409 (§11.3), on every store.
// The Go API refuses the same way, with ErrWorkflowFinished.
func TestWorkflowCancelRacingCompletionStaysCompleted(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := &ackOnReadStore{Store: openStore(t, kind)}
			client, err := pronto.NewClient(st, &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			id, _ := createWF(t, s, `{"type":"group","name":"g","jobs":[{"type":"g.a","args":[],"options":{"queue":"wfspec-race"}}]}`)
			j := waitFetchWF(t, s, "wfspec-race")
			st.mu.Lock()
			st.hook = func() { ack(t, s, j["id"].(string), `"done"`) } // the worker's ack lands now
			st.mu.Unlock()
			r := call(t, s, "DELETE", "/ojs/v1/workflows/"+id, nil)
			wf := getWF(t, s, id)
			if wf["state"] != "completed" {
				t.Errorf("a workflow whose every step completed is %v after a DELETE that raced the last ack (DELETE answered %d %s)", wf["state"], r.status, r.raw)
			}
			checkErrorBody(t, r, http.StatusConflict, "")
			if _, err := client.WorkflowCancel(context.Background(), id); !errors.Is(err, pronto.ErrWorkflowFinished) {
				t.Errorf("WorkflowCancel of a completed workflow: %v, want ErrWorkflowFinished", err)
			}
		})
	}
}

// TestWorkflowCancelResponseCounts: the cancel response carries steps_cancelled and
// steps_already_completed (ojs-http-binding.md §14.3), and metadata.cancelled_at with
// completed_count (ojs-workflows.md §11.3).
func TestWorkflowCancelResponseCounts(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id, _ := createWF(t, s, `{"type":"group","name":"g","jobs":[{"type":"g.a","args":[],"options":{"queue":"wfspec-cr"}},{"type":"g.b","args":[],"options":{"queue":"wfspec-cr2"}},{"type":"g.c","args":[],"options":{"queue":"wfspec-cr2"}}]}`)
	ack(t, s, waitFetchWF(t, s, "wfspec-cr")["id"].(string), `1`)
	r := mustCall(t, s, 200, "DELETE", "/ojs/v1/workflows/"+id, nil)
	wf := obj(t, r, "workflow")
	md, _ := wf["metadata"].(map[string]any)
	if wf["state"] != "cancelled" {
		t.Fatalf("state %v", wf["state"])
	}
	if wf["steps_cancelled"] != 2.0 || wf["steps_already_completed"] != 1.0 {
		t.Errorf("steps_cancelled %v, steps_already_completed %v, want 2 and 1 (binding §14.3): %s", wf["steps_cancelled"], wf["steps_already_completed"], r.raw)
	}
	if md["cancelled_at"] == nil || md["completed_count"] != 1.0 {
		t.Errorf("metadata %v: want cancelled_at and completed_count 1 (§11.3)", md)
	}
	checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/workflows/"+id, nil), http.StatusConflict, "")
}

// TestWorkflowGoCallbackWaitsForLaterSteps: a pronto.Workflow callback waits for every step, those
// added after it too (OnSuccess "runs once every step has completed").
func TestWorkflowGoCallbackWaitsForLaterSteps(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := openStore(t, kind)
			client, err := pronto.NewClient(st, &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			q := &pronto.InsertOpts{Queue: "wfspec-go"}
			w := pronto.NewWorkflow("go").
				Add("a", wfGoStep{1}, q).
				OnSuccess(pronto.WorkflowJob{Args: wfGoStep{9}, Opts: &pronto.InsertOpts{Queue: "wfspec-go-cb"}}).
				Add("b", wfGoStep{2}, &pronto.InsertOpts{Queue: "wfspec-go-b"})
			res, err := client.WorkflowInsert(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			if p := res.Jobs["on_success"].ParentIDs; len(p) != 2 {
				t.Errorf("on_success waits for %d steps, want both a and b", len(p))
			}
			if got := strings.Join(res.Order, " "); got != "a on_success b" {
				t.Errorf("Order %s, want the order of the calls", got)
			}
			ack(t, s, waitFetchWF(t, s, "wfspec-go")["id"].(string), `1`)
			if j := fetchOne(t, s, "wfspec-go-cb"); j != nil {
				t.Errorf("on_success ran while step b is still %v: %v", res.Jobs["b"].State, j["id"])
			}
			ack(t, s, waitFetchWF(t, s, "wfspec-go-b")["id"].(string), `2`)
			waitFetchWF(t, s, "wfspec-go-cb")
		})
	}
}

// TestWorkflowStepNameReservedForCallbacks: steps[] and the create response name callbacks
// "on_success", "on_failure" and "on_complete", so a step may not take those names: a dag step so
// named is refused with 400 naming it, as the Go builder refuses it; a callback step of the binding's
// form may carry its own name. Every job is listed once.
func TestWorkflowStepNameReservedForCallbacks(t *testing.T) {
	s, client := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/workflows", `{"name":"w","steps":[{"id":"on_success","type":"s.step","args":[],"depends_on":[]}],"callbacks":{"on_success":{"type":"s.callback","args":[]}}}`)
	checkErrorBody(t, r, http.StatusBadRequest, "")
	if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "steps[0].id" {
		t.Errorf("field %v, want steps[0].id", f)
	}
	_, err := client.WorkflowInsert(context.Background(), pronto.NewWorkflow("w").Add("on_failure", wfGoStep{1}, nil))
	if !errors.Is(err, pronto.ErrInvalidArgs) {
		t.Errorf("Go builder step named on_failure: %v, want ErrInvalidArgs", err)
	}

	r = mustCall(t, s, 201, "POST", "/ojs/v1/workflows", `{"steps":[{"id":"a","type":"s.step","args":[],"depends_on":[]},{"id":"on_success","type":"s.callback","args":[],"depends_on":["a"],"options":{"callback_type":"on_success"}}]}`)
	var jobTypes []string
	for _, j := range r.body["jobs"].([]any) {
		jobTypes = append(jobTypes, j.(map[string]any)["type"].(string))
	}
	if got := strings.Join(jobTypes, " "); got != "s.step s.callback" || stepTypes(t, obj(t, r, "workflow")) != got {
		t.Fatalf("created jobs %s, steps %s; want the step, then the callback: %s", got, stepTypes(t, obj(t, r, "workflow")), r.raw)
	}
}
