package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// wfEvents returns the workflow.* events of workflow id in GET /ojs/v1/events, oldest first.
func wfEvents(t *testing.T, s *Server, id string) []map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=workflow.*&limit=1000", nil)
	var out []map[string]any
	for _, e := range r.body["events"].([]any) {
		ev := e.(map[string]any)
		if ev["subject"] != id {
			continue
		}
		if d := ev["data"].(map[string]any); d["workflow_id"] != id {
			t.Fatalf("event %v of workflow %s names workflow %v", ev["type"], id, d["workflow_id"])
		}
		out = append(out, ev)
	}
	return out
}

// waitWF waits until workflow id's events satisfy done, and returns them.
func waitWF(t *testing.T, s *Server, id string, what string, done func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := wfEvents(t, s, id)
		if done(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: the events of workflow %s are %v", what, id, loggedTypes(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countType counts the events of type typ.
func countType(evs []map[string]any, typ string) int {
	n := 0
	for _, e := range evs {
		if e["type"] == typ {
			n++
		}
	}
	return n
}

// hasN returns a waitWF condition: at least n events of type typ.
func hasN(typ string, n int) func([]map[string]any) bool {
	return func(evs []map[string]any) bool { return countType(evs, typ) >= n }
}

// ofType returns the data of the events of type typ, in order.
func ofType(evs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["type"] == typ {
			out = append(out, e["data"].(map[string]any))
		}
	}
	return out
}

// settle runs a job outside any workflow through fetch and ack and waits for its job.completed:
// the client's events are recorded in order, so every outcome reported before it has had its
// workflow events recorded by then.
func settle(t *testing.T, s *Server) {
	t.Helper()
	id := enqueueJob(t, s, `{"type":"settle.job","args":[],"options":{"queue":"wfev-settle"}}`)
	j := fetchOne(t, s, "wfev-settle")
	if j == nil || j["id"] != id {
		t.Fatalf("settle: fetched %v, want %s", j, id)
	}
	ack(t, s, id, "null")
	waitLogged(t, s, id, "job.completed")
}

// createWF creates a workflow over HTTP and returns its id and its jobs' ids in order.
func createWF(t *testing.T, s *Server, body string) (string, []string) {
	t.Helper()
	r := mustCall(t, s, 201, "POST", "/ojs/v1/workflows", body)
	var ids []string
	for _, j := range r.body["jobs"].([]any) {
		ids = append(ids, j.(map[string]any)["id"].(string))
	}
	return r.body["workflow"].(map[string]any)["id"].(string), ids
}

// num reads a JSON number of data.
func num(t *testing.T, d map[string]any, key string) int {
	t.Helper()
	v, ok := d[key].(float64)
	if !ok {
		t.Fatalf("%s is %v (%T), not a number, in %v", key, d[key], d[key], d)
	}
	return int(v)
}

// checkOnce fails unless evs hold exactly one workflow.started, first, and the finish typ, last.
func checkOnce(t *testing.T, evs []map[string]any, finish string) {
	t.Helper()
	types := loggedTypes(evs)
	if countType(evs, "workflow.started") != 1 || types[0] != "workflow.started" {
		t.Fatalf("events %v: want one workflow.started, first", types)
	}
	if countType(evs, finish) != 1 || types[len(types)-1] != finish {
		t.Fatalf("events %v: want one %s, last", types, finish)
	}
	for _, other := range []string{"workflow.completed", "workflow.failed"} {
		if other != finish && countType(evs, other) != 0 {
			t.Fatalf("events %v: a %s with a %s", types, other, finish)
		}
	}
}

// TestWorkflowEventsChain: a chain of three steps run through fetch and ack records
// workflow.started once, then one workflow.step_completed per step with the spec's fields and a
// falling steps_remaining, then workflow.completed once, on every store.
func TestWorkflowEventsChain(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			wf, ids := createWF(t, s, `{"type":"chain","name":"etl","steps":[
				{"type":"wf.extract","args":[],"options":{"queue":"wfev"}},
				{"type":"wf.transform","args":[],"options":{"queue":"wfev"}},
				{"type":"wf.load","args":[],"options":{"queue":"wfev"}}]}`)
			kinds := []string{"wf.extract", "wf.transform", "wf.load"}
			for i, id := range ids {
				j := fetchOne(t, s, "wfev")
				if j == nil || j["id"] != id {
					t.Fatalf("step %d: fetched %v, want %s", i, j, id)
				}
				if i == 0 {
					evs := waitWF(t, s, wf, "workflow.started", hasN("workflow.started", 1))
					d := ofType(evs, "workflow.started")[0]
					if d["workflow_name"] != "etl" || num(t, d, "total_steps") != 3 {
						t.Fatalf("workflow.started %v", d)
					}
				}
				ack(t, s, id, `{"step":`+string(rune('0'+i))+`}`)
				// Waited for, so that each read of the workflow sees this step as the latest.
				waitWF(t, s, wf, "step "+id, hasN("workflow.step_completed", i+1))
			}
			waitWF(t, s, wf, "workflow.completed", hasN("workflow.completed", 1))
			settle(t, s)
			evs := wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.completed")
			steps := ofType(evs, "workflow.step_completed")
			if len(steps) != 3 {
				t.Fatalf("events %v: want 3 workflow.step_completed", loggedTypes(evs))
			}
			for i, d := range steps {
				// The chain's steps were given no ids: each is named by its job id.
				if d["workflow_name"] != "etl" || d["step_id"] != ids[i] || d["step_type"] != kinds[i] ||
					num(t, d, "steps_remaining") != 2-i || num(t, d, "duration_ms") < 0 {
					t.Fatalf("step %d: workflow.step_completed %v", i, d)
				}
			}
			d := ofType(evs, "workflow.completed")[0]
			if d["workflow_name"] != "etl" || num(t, d, "total_steps") != 3 || num(t, d, "duration_ms") < 0 {
				t.Fatalf("workflow.completed %v", d)
			}
			for _, e := range evs {
				if e["source"] == "" || e["specversion"] != "1.0" || !strings.HasPrefix(e["id"].(string), "evt_") {
					t.Fatalf("envelope %v", e)
				}
			}
		})
	}
}

// TestWorkflowEventsDAG: a diamond dag (a, then b and c, then d) created over HTTP with named
// steps records its steps under their names, b and c fetched together, and completes once, on
// every store.
func TestWorkflowEventsDAG(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			wf, ids := createWF(t, s, `{"type":"dag","name":"diamond","steps":[
				{"name":"a","type":"dag.a","args":[],"options":{"queue":"wfdag"}},
				{"name":"b","type":"dag.b","args":[],"options":{"queue":"wfdag"},"depends_on":["a"]},
				{"name":"c","type":"dag.c","args":[],"options":{"queue":"wfdag"},"depends_on":["a"]},
				{"name":"d","type":"dag.d","args":[],"options":{"queue":"wfdag"},"depends_on":["b","c"]}]}`)
			byID := map[string]string{ids[0]: "a", ids[1]: "b", ids[2]: "c", ids[3]: "d"}
			j := fetchOne(t, s, "wfdag")
			if j == nil || byID[j["id"].(string)] != "a" {
				t.Fatalf("first fetch %v, want step a", j)
			}
			ack(t, s, ids[0], "1")
			waitWF(t, s, wf, "step a", hasN("workflow.step_completed", 1))
			r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["wfdag"],"worker_id":"w","count":2}`)
			if n := len(r.body["jobs"].([]any)); n != 2 {
				t.Fatalf("fetched %d of b and c: %s", n, r.raw)
			}
			ack(t, s, ids[2], "3")
			waitWF(t, s, wf, "step c", hasN("workflow.step_completed", 2))
			ack(t, s, ids[1], "2")
			waitWF(t, s, wf, "step b", hasN("workflow.step_completed", 3))
			if j := fetchOne(t, s, "wfdag"); j == nil || j["id"] != ids[3] {
				t.Fatalf("last fetch %v, want step d", j)
			}
			ack(t, s, ids[3], "4")
			waitWF(t, s, wf, "workflow.completed", hasN("workflow.completed", 1))
			settle(t, s)
			evs := wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.completed")
			var got []string
			for _, d := range ofType(evs, "workflow.step_completed") {
				got = append(got, d["step_id"].(string)+":"+d["step_type"].(string))
				if d["workflow_name"] != "diamond" {
					t.Fatalf("workflow.step_completed %v", d)
				}
			}
			if want := []string{"a:dag.a", "c:dag.c", "b:dag.b", "d:dag.d"}; !slices.Equal(got, want) {
				t.Fatalf("steps completed %v, want %v", got, want)
			}
			var rem []int
			for _, d := range ofType(evs, "workflow.step_completed") {
				rem = append(rem, num(t, d, "steps_remaining"))
			}
			if !slices.Equal(rem, []int{3, 2, 1, 0}) {
				t.Fatalf("steps_remaining %v, want [3 2 1 0]", rem)
			}
			if d := ofType(evs, "workflow.started")[0]; num(t, d, "total_steps") != 4 {
				t.Fatalf("workflow.started %v", d)
			}
		})
	}
}

type wfGoStep struct {
	N int `json:"n"`
}

func (wfGoStep) Kind() string { return "wfgo.step" }

// TestWorkflowEventsGoWorkers: a dag inserted through the Go API and run by the client's own Go
// workers (whose starts the server does not follow) records workflow.started once, before its first
// step's workflow.step_completed, a workflow.step_completed per step named by its job id, and
// workflow.completed once, last, on every store; callbacks are not steps.
func TestWorkflowEventsGoWorkers(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfGoStep]) error {
				return pronto.RecordResult(ctx, j.Args.N)
			}))
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{
				Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 4}},
				Workers: workers, PollInterval: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			w := pronto.NewWorkflow("go-diamond").
				Add("a", wfGoStep{1}, nil).
				Add("b", wfGoStep{2}, nil, "a").
				Add("c", wfGoStep{3}, nil, "a").
				Add("d", wfGoStep{4}, nil, "b", "c").
				OnSuccess(pronto.WorkflowJob{Args: wfGoStep{5}})
			res, err := client.WorkflowInsert(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			wf := w.ID()
			waitWF(t, s, wf, "workflow.completed", hasN("workflow.completed", 1))
			waitLogged(t, s, res.Jobs["on_success"].ID, "job.completed")
			evs := wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.completed")
			steps := ofType(evs, "workflow.step_completed")
			if len(steps) != 4 {
				t.Fatalf("events %v: want 4 workflow.step_completed (the callback is no step)", loggedTypes(evs))
			}
			name := map[string]string{}
			for step, j := range res.Jobs {
				name[j.ID] = step
			}
			var order []string
			for _, d := range steps {
				order = append(order, name[d["step_id"].(string)])
				if d["step_type"] != "wfgo.step" || d["workflow_name"] != "go-diamond" {
					t.Fatalf("workflow.step_completed %v", d)
				}
			}
			if order[0] != "a" || order[3] != "d" || !slices.Contains(order, "b") || !slices.Contains(order, "c") {
				t.Fatalf("steps completed in the order %v", order)
			}
			// Each count is read after its step's report, which may come after the next steps
			// completed: the counts never rise, start at most at 3 and end at 0.
			var rem []int
			for _, d := range steps {
				rem = append(rem, num(t, d, "steps_remaining"))
			}
			if rem[0] > 3 || rem[3] != 0 || !slices.IsSortedFunc(rem, func(a, b int) int { return b - a }) {
				t.Fatalf("steps_remaining %v", rem)
			}
			if d := ofType(evs, "workflow.completed")[0]; num(t, d, "total_steps") != 4 {
				t.Fatalf("workflow.completed %v", d)
			}
		})
	}
}

// TestWorkflowEventsFailed: a chain whose middle step fails for good records workflow.failed once,
// naming that step and its error, and no workflow.completed; a group whose one step fails while
// the other runs records workflow.failed only when the other has finished, after its
// workflow.step_completed. On every store.
func TestWorkflowEventsFailed(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			nack := func(id string) {
				t.Helper()
				r := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w","error":{"code":"disk_full","message":"no space left","retryable":false}}`)
				if r.status != 200 || r.body["state"] != "discarded" {
					t.Fatalf("nack %s: %d %s", id, r.status, r.raw)
				}
			}
			checkFailed := func(evs []map[string]any, step, kind string) {
				t.Helper()
				d := ofType(evs, "workflow.failed")[0]
				e, _ := d["error"].(map[string]any)
				if d["failed_step_id"] != step || d["failed_step_type"] != kind || e["code"] != "disk_full" || e["message"] != "no space left" {
					t.Fatalf("workflow.failed %v", d)
				}
			}

			wf, ids := createWF(t, s, `{"type":"chain","name":"fails","steps":[
				{"type":"f.one","args":[],"options":{"queue":"wffail"}},
				{"type":"f.two","args":[],"options":{"queue":"wffail"}},
				{"type":"f.three","args":[],"options":{"queue":"wffail"}}]}`)
			fetchOne(t, s, "wffail")
			ack(t, s, ids[0], "null")
			waitWF(t, s, wf, "step 0", hasN("workflow.step_completed", 1))
			fetchOne(t, s, "wffail")
			nack(ids[1])
			waitWF(t, s, wf, "workflow.failed", hasN("workflow.failed", 1))
			settle(t, s)
			evs := wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.failed")
			if countType(evs, "workflow.step_completed") != 1 {
				t.Fatalf("events %v: want the one step that completed", loggedTypes(evs))
			}
			checkFailed(evs, ids[1], "f.two")
			if d := ofType(evs, "workflow.failed")[0]; d["workflow_name"] != "fails" {
				t.Fatalf("workflow.failed %v", d)
			}

			// A group: one step fails while the other is still running.
			wf, ids = createWF(t, s, `{"type":"group","jobs":[
				{"type":"g.one","args":[],"options":{"queue":"wfgroupfail"}},
				{"type":"g.two","args":[],"options":{"queue":"wfgroupfail"}}]}`)
			r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["wfgroupfail"],"worker_id":"w","count":2}`)
			if n := len(r.body["jobs"].([]any)); n != 2 {
				t.Fatalf("fetched %d of the group's 2: %s", n, r.raw)
			}
			nack(ids[0])
			settle(t, s)
			if evs := wfEvents(t, s, wf); countType(evs, "workflow.failed") != 0 {
				t.Fatalf("events %v: workflow.failed while a step still runs", loggedTypes(evs))
			}
			ack(t, s, ids[1], "null")
			waitWF(t, s, wf, "workflow.failed", hasN("workflow.failed", 1))
			settle(t, s)
			evs = wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.failed")
			if got := loggedTypes(evs); !slices.Equal(got, []string{"workflow.started", "workflow.step_completed", "workflow.failed"}) {
				t.Fatalf("events %v", got)
			}
			checkFailed(evs, ids[0], "g.one")
			// A workflow without a name is named by its id.
			if d := ofType(evs, "workflow.failed")[0]; d["workflow_name"] != wf {
				t.Fatalf("workflow.failed of an unnamed workflow %v", d)
			}
		})
	}
}

// TestWorkflowEventsGroupStartsOnce: the two steps of a group fetched at once by two workers record
// one workflow.started, on every store.
func TestWorkflowEventsGroupStartsOnce(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			wf, ids := createWF(t, s, `{"type":"group","name":"pair","jobs":[
				{"type":"p.one","args":[],"options":{"queue":"wfpair"}},
				{"type":"p.two","args":[],"options":{"queue":"wfpair"}}]}`)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var got []string
			var errs []error
			for _, worker := range []string{"w1", "w2"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := httptest.NewRequest("POST", "/ojs/v1/workers/fetch", strings.NewReader(`{"queues":["wfpair"],"worker_id":"`+worker+`"}`))
					req.Header.Set("Content-Type", "application/openjobspec+json")
					rec := httptest.NewRecorder()
					s.ServeHTTP(rec, req)
					mu.Lock()
					defer mu.Unlock()
					if rec.Code != 200 {
						errs = append(errs, errors.New(rec.Body.String()))
						return
					}
					for _, id := range ids {
						if strings.Contains(rec.Body.String(), id) {
							got = append(got, worker+" "+id)
						}
					}
				}()
			}
			wg.Wait()
			if len(errs) > 0 || len(got) != 2 {
				t.Fatalf("fetches: %v %v", got, errs)
			}
			for _, g := range got {
				worker, id, _ := strings.Cut(g, " ")
				r := call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"`+worker+`"}`)
				if r.status != 200 {
					t.Fatalf("ack %s: %d %s", id, r.status, r.raw)
				}
			}
			waitWF(t, s, wf, "workflow.completed", hasN("workflow.completed", 1))
			settle(t, s)
			evs := wfEvents(t, s, wf)
			checkOnce(t, evs, "workflow.completed")
			if n := countType(evs, "workflow.step_completed"); n != 2 {
				t.Fatalf("events %v: want 2 workflow.step_completed", loggedTypes(evs))
			}
			if d := ofType(evs, "workflow.started")[0]; d["workflow_name"] != "pair" || num(t, d, "total_steps") != 2 {
				t.Fatalf("workflow.started %v", d)
			}
		})
	}
}

// TestWorkflowEventsNotForPlainJobs: a job outside any workflow, run to completion and to a discard,
// records no workflow event.
func TestWorkflowEventsNotForPlainJobs(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			id := enqueueJob(t, s, `{"type":"plain.job","args":[],"options":{"queue":"wfplain","retry":{"max_attempts":1}}}`)
			fetchOne(t, s, "wfplain")
			r := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w","error":{"message":"no"}}`)
			if r.status != 200 || r.body["state"] != "discarded" {
				t.Fatalf("nack: %d %s", r.status, r.raw)
			}
			waitLogged(t, s, id, "job.discarded")
			settle(t, s)
			r = mustCall(t, s, 200, "GET", "/ojs/v1/events?types=workflow.*&limit=1000", nil)
			if evs := r.body["events"].([]any); len(evs) != 0 {
				t.Fatalf("workflow events of jobs outside workflows: %s", r.raw)
			}
		})
	}
}

// workerEvs returns the worker.* events of worker id in the window of s.
func workerEvs(t *testing.T, s *Server, id string) []map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=worker.*&limit=1000", nil)
	var out []map[string]any
	for _, e := range r.body["events"].([]any) {
		if ev := e.(map[string]any); ev["subject"] == id {
			out = append(out, ev)
		}
	}
	return out
}

// TestWorkerEvents: an OJS worker's first fetch records worker.started with its queues (once per
// server process), each heartbeat
// worker.heartbeat with its active jobs, queues and what it reported of its memory and CPU, and the
// first heartbeat answered "quiet" after an operator quieted it worker.quiet. On every store.
func TestWorkerEvents(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			s.events.workers.every = 0 // every heartbeat recorded (TestWorkerHeartbeatEventsThrottled)
			const wk = "wk-events-1"
			enqueueJob(t, s, `{"type":"wk.job","args":[],"options":{"queue":"wkq"}}`)
			fetch := func(s *Server) []any {
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["wkq","wkq2"],"worker_id":"`+wk+`"}`)
				return r.body["jobs"].([]any)
			}
			if n := len(fetch(s)); n != 1 {
				t.Fatalf("fetched %d jobs", n)
			}
			fetch(s)
			evs := workerEvs(t, s, wk)
			if got := loggedTypes(evs); !slices.Equal(got, []string{"worker.started"}) {
				t.Fatalf("events %v, want one worker.started", got)
			}
			d := evs[0]["data"].(map[string]any)
			if d["worker_id"] != wk || !slices.Equal(toStrings(d["queues"]), []string{"wkq", "wkq2"}) {
				t.Fatalf("worker.started %v", d)
			}

			hb := func(body string) string {
				t.Helper()
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", body)
				return r.body["state"].(string)
			}
			if st := hb(`{"worker_id":"` + wk + `","active_jobs":1,"memory_mb":256.5}`); st != "running" {
				t.Fatalf("heartbeat answered %s", st)
			}
			evs = workerEvs(t, s, wk)
			if got := loggedTypes(evs); !slices.Equal(got, []string{"worker.started", "worker.heartbeat"}) {
				t.Fatalf("events %v", got)
			}
			d = evs[1]["data"].(map[string]any)
			if d["worker_id"] != wk || num(t, d, "active_jobs") != 1 || d["memory_mb"] != 256.5 ||
				!slices.Equal(toStrings(d["queues"]), []string{"wkq", "wkq2"}) {
				t.Fatalf("worker.heartbeat %v", d)
			}
			if _, ok := d["cpu_percent"]; ok {
				t.Fatalf("worker.heartbeat with a cpu_percent the worker did not send: %v", d)
			}

			mustCall(t, s, 200, "POST", "/ojs/v1/admin/workers/"+wk+"/quiet", nil)
			for range 2 {
				if st := hb(`{"worker_id":"` + wk + `","active_jobs":1}`); st != "quiet" {
					t.Fatalf("heartbeat after quiet answered %s", st)
				}
			}
			evs = workerEvs(t, s, wk)
			want := []string{"worker.started", "worker.heartbeat", "worker.heartbeat", "worker.quiet", "worker.heartbeat"}
			if got := loggedTypes(evs); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			if d := evs[3]["data"].(map[string]any); d["worker_id"] != wk || num(t, d, "active_jobs") != 1 {
				t.Fatalf("worker.quiet %v", d)
			}

			// The window is this process's: another server hearing from the worker records its own
			// worker.started.
			s2, err := New(Config{Client: s.client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s2.Close() })
			fetch(s2)
			fetch(s2)
			if got := loggedTypes(workerEvs(t, s2, wk)); !slices.Equal(got, []string{"worker.started"}) {
				t.Fatalf("another server's window: events %v", got)
			}

			// A heartbeat naming its jobs rather than counting them: active_jobs is the jobs it holds.
			const wk2 = "wk-events-2"
			id := enqueueJob(t, s, `{"type":"wk.job","args":[],"options":{"queue":"wkq3"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk2+`","active_job_ids":[]}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["wkq3"],"worker_id":"`+wk2+`"}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk2+`","active_job_ids":["`+id+`"]}`)
			evs = workerEvs(t, s, wk2)
			if got := loggedTypes(evs); !slices.Equal(got, []string{"worker.started", "worker.heartbeat", "worker.heartbeat"}) {
				t.Fatalf("events %v", got)
			}
			// First heard by a heartbeat: no queues known yet.
			if d := evs[0]["data"].(map[string]any); len(toStrings(d["queues"])) != 0 {
				t.Fatalf("worker.started %v", d)
			}
			if d := evs[2]["data"].(map[string]any); num(t, d, "active_jobs") != 1 || !slices.Equal(toStrings(d["queues"]), []string{"wkq3"}) {
				t.Fatalf("worker.heartbeat %v", d)
			}
		})
	}
}

// toStrings reads a JSON array of strings.
func toStrings(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestWorkflowEventsFinishWaits: a finish read while the store counts a completed step whose report
// has not been handled waits for that report (so no workflow.step_completed follows
// workflow.completed), and is recorded without it in the end when the report never comes (the step
// went through another process).
func TestWorkflowEventsFinishWaits(t *testing.T) {
	s := &Server{events: newEventLog(100), source: "ojs://pronto/api"}
	wf := &store.Workflow{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Name: "w", State: store.WorkflowCompleted,
		Total: 2, Counts: map[store.State]int{store.StateCompleted: 2}, CreatedAt: time.Now()}
	count := func() int {
		evs, _ := s.events.query(eventFilter{types: []string{"workflow.completed"}, limit: 10})
		return len(evs)
	}
	for _, reported := range []bool{true, false} {
		s.events.reset()
		rec := &workflowRecord{id: wf.ID, completed: 1}
		rec.mu.Lock()
		s.workflowFinish(rec, wf, time.Now())
		rec.mu.Unlock()
		if n := count(); n != 0 {
			t.Fatalf("%d workflow.completed before the other step's report", n)
		}
		if reported {
			rec.mu.Lock()
			rec.completed++
			s.workflowFinish(rec, wf, time.Now())
			rec.mu.Unlock()
			if n := count(); n != 1 {
				t.Fatalf("%d workflow.completed after the other step's report", n)
			}
			rec.mu.Lock()
			if rec.timer != nil || rec.pending != nil {
				t.Fatal("the held finish is still pending")
			}
			rec.mu.Unlock()
			continue
		}
		deadline := time.Now().Add(10 * workflowFinishWait)
		for count() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := count(); n != 1 {
			t.Fatalf("%d workflow.completed when the other step's report never came", n)
		}
	}
}

// TestWorkerHeartbeatEventsThrottled: a worker's heartbeats are recorded as worker.heartbeat when
// something changed (its active count, the answered state) and otherwise at most once a
// workerHeartbeatEventEvery: SDKs beat every few seconds, and recording each beat let an idle
// fleet push every job event out of the window.
func TestWorkerHeartbeatEventsThrottled(t *testing.T) {
	s := serverOn(t, "memory")
	const wk = "wk-throttled"
	hb := func(active int) {
		t.Helper()
		mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk+`","active_jobs":`+strconv.Itoa(active)+`}`)
	}
	for range 3 {
		hb(2)
	}
	want := []string{"worker.started", "worker.heartbeat"}
	if got := loggedTypes(workerEvs(t, s, wk)); !slices.Equal(got, want) {
		t.Fatalf("three unchanged heartbeats: events %v, want %v", got, want)
	}
	hb(3) // its active count changed
	want = append(want, "worker.heartbeat")
	if got := loggedTypes(workerEvs(t, s, wk)); !slices.Equal(got, want) {
		t.Fatalf("a heartbeat with another active count: events %v, want %v", got, want)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/admin/workers/"+wk+"/quiet", nil)
	hb(3) // answered quiet: a new state
	hb(3)
	want = append(want, "worker.heartbeat", "worker.quiet")
	if got := loggedTypes(workerEvs(t, s, wk)); !slices.Equal(got, want) {
		t.Fatalf("heartbeats answered quiet: events %v, want %v", got, want)
	}
}
