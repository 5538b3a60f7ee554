package server

import (
	"testing"
)

// A batch's callbacks are part of its outcome (ojs-workflows.md §9.4 rule 4, §9.5): the batch runs
// until they have finished, a callback discarded after its retries fails it and is recorded in its
// metadata with its callback type, and workflow.completed comes only once the callbacks are done.

func TestWorkflowCallbackDiscardedFailsBatch(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id, ids := createWF(t, s, `{"type":"batch","name":"export",
		"jobs":[{"type":"cbf.row","args":[1],"options":{"queue":"cbf"}}],
		"callbacks":{"on_success":{"type":"cbf.ok","args":[],"options":{"queue":"cbf-ok","retry":{"max_attempts":1}}}}}`)
	ack(t, s, waitFetchWF(t, s, "cbf")["id"].(string), `"row"`)
	settle(t, s)
	if wf := getWF(t, s, id); wf["state"] != "running" {
		t.Fatalf("a batch whose on_success is still to run is %v, want running", wf["state"])
	}
	if n := countType(wfEvents(t, s, id), "workflow.completed"); n != 0 {
		t.Fatalf("workflow.completed recorded %d times before the callback ran", n)
	}

	cb := waitFetchWF(t, s, "cbf-ok")
	if cb["id"] != ids[1] {
		t.Fatalf("fetched %v, want the on_success callback %s", cb["id"], ids[1])
	}
	if r := nackFetched(t, s, cb, `{"code":"notify_down","message":"mail server down"}`); r.status != 200 || r.body["state"] != "discarded" {
		t.Fatalf("nack of the callback: %d %s", r.status, r.raw)
	}
	wf := getWF(t, s, id)
	if wf["state"] != "failed" {
		t.Fatalf("a batch whose on_success was discarded is %v, want failed", wf["state"])
	}
	md := wf["metadata"].(map[string]any)
	if got := md["failed_job_ids"].([]any); len(got) != 1 || got[0] != ids[1] {
		t.Fatalf("failed_job_ids %v, want the callback %s", got, ids[1])
	}
	errs := md["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("errors %v, want the callback's", errs)
	}
	e := errs[0].(map[string]any)
	if e["job_id"] != ids[1] || e["callback"] != "on_success" || e["code"] != "notify_down" || e["message"] != "mail server down" {
		t.Fatalf("the callback's error %v, want its job id, callback type on_success and its error", e)
	}
	if _, ok := md["completed_at"]; !ok {
		t.Fatalf("a failed batch has metadata.completed_at: %v", md)
	}

	evs := waitWF(t, s, id, "workflow.failed", hasN("workflow.failed", 1))
	if n := countType(evs, "workflow.completed"); n != 0 {
		t.Fatalf("workflow.completed recorded %d times for a failed batch", n)
	}
	failed := ofType(evs, "workflow.failed")[0]
	if failed["failed_step_id"] != "on_success" || failed["callback"] != "on_success" || failed["failed_step_type"] != "cbf.ok" {
		t.Fatalf("workflow.failed %v, want it to name the on_success callback", failed)
	}
	if e := failed["error"].(map[string]any); e["code"] != "notify_down" {
		t.Fatalf("workflow.failed error %v", e)
	}
}

func TestWorkflowCompletedAfterCallbacks(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id, _ := createWF(t, s, `{"type":"batch","name":"report",
		"jobs":[{"type":"cbc.row","args":[1],"options":{"queue":"cbc"}},{"type":"cbc.row","args":[2],"options":{"queue":"cbc"}}],
		"callbacks":{"on_complete":{"type":"cbc.done","args":[],"options":{"queue":"cbc-done"}},
			"on_failure":{"type":"cbc.failed","args":[],"options":{"queue":"cbc-failed"}}}}`)
	ack(t, s, waitFetchWF(t, s, "cbc")["id"].(string), `1`)
	ack(t, s, waitFetchWF(t, s, "cbc")["id"].(string), `2`)
	waitWF(t, s, id, "both steps' workflow.step_completed", hasN("workflow.step_completed", 2))
	settle(t, s)
	if n := countType(wfEvents(t, s, id), "workflow.completed"); n != 0 {
		t.Fatalf("workflow.completed recorded %d times while on_complete is still to run", n)
	}
	wf := getWF(t, s, id)
	if wf["state"] != "running" || wf["finished_at"] != nil {
		t.Fatalf("a batch waiting for its on_complete: %v", wf)
	}
	if fetchOne(t, s, "cbc-failed") != nil {
		t.Fatal("on_failure ran after every step completed")
	}

	ack(t, s, waitFetchWF(t, s, "cbc-done")["id"].(string), `null`)
	waitWF(t, s, id, "workflow.completed", hasN("workflow.completed", 1))
	settle(t, s)
	evs := wfEvents(t, s, id)
	if n := countType(evs, "workflow.completed"); n != 1 {
		t.Fatalf("workflow.completed recorded %d times, want once", n)
	}
	if last := evs[len(evs)-1]; last["type"] != "workflow.completed" {
		t.Fatalf("the last workflow event is %v, want workflow.completed", last["type"])
	}
	// on_failure cancelled by its condition is no failure.
	wf = getWF(t, s, id)
	if wf["state"] != "completed" {
		t.Fatalf("a batch whose steps and on_complete completed is %v", wf["state"])
	}
	if _, ok := wf["metadata"].(map[string]any)["failed_job_ids"]; ok {
		t.Fatalf("a completed batch names failed jobs: %v", wf["metadata"])
	}

	// Cancel of a batch waiting only on its callback cancels it.
	id2, ids2 := createWF(t, s, `{"type":"batch","name":"cancel-me",
		"jobs":[{"type":"cbc.row","args":[3],"options":{"queue":"cbc2"}}],
		"callbacks":{"on_complete":{"type":"cbc.done","args":[],"options":{"queue":"cbc2-done"}}}}`)
	ack(t, s, waitFetchWF(t, s, "cbc2")["id"].(string), `3`)
	r := mustCall(t, s, 200, "DELETE", "/ojs/v1/workflows/"+id2, nil)
	if wf := obj(t, r, "workflow"); wf["state"] != "cancelled" {
		t.Fatalf("cancel of a batch waiting on its callback: %s", r.raw)
	}
	if j := obj(t, mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+ids2[1], nil), "job"); j["state"] != "cancelled" {
		t.Fatalf("the callback after the cancel: %v", j["state"])
	}
	if fetchOne(t, s, "cbc2-done") != nil {
		t.Fatal("the cancelled callback was handed out")
	}
}
