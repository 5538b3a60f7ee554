package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// A worker's progress reports as the OJS server keeps them: the last report before an outcome,
// a retry's fresh start, progress as a heartbeat, and progress events (ojs-progress.md).

// putClaimProgress reports progress body on job id, naming the claim of the fetched job j, and
// requires 204.
func putClaimProgress(t *testing.T, h http.Handler, j map[string]any, body string) {
	t.Helper()
	// Splice the claim into the body object.
	claim := fmt.Sprintf(`"worker_id":"w","claim_token":%q,`, j["claim_token"])
	r := call(t, h, "PUT", "/ojs/v1/jobs/"+j["id"].(string)+"/progress", "{"+claim+body[1:])
	if r.status != http.StatusNoContent {
		t.Fatalf("progress %s: %d %s", body, r.status, r.raw)
	}
}

// waitProgress polls GET .../progress until ok holds for its body, failing with what it
// last read after a generous deadline.
func waitProgress(t *testing.T, h http.Handler, id string, what string, ok func(b map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for {
		r := call(t, h, "GET", "/ojs/v1/jobs/"+id+"/progress", nil)
		if r.status != 200 {
			t.Fatalf("GET progress: %d %s", r.status, r.raw)
		}
		if ok(r.body) {
			return r.body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never seen; GET .../progress still answers %s", what, r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProgressLastReportBeforeNackIsKept: a worker reports 0.2, then (within the progress interval,
// so the throttle holds it back) 0.9 with a checkpoint, then fails the attempt. The report held back
// is written before the outcome, while its claim holds the job: ojs-progress.md 8.2 ("the backend
// MUST retain the last reported progress"), 6.2 ("MUST store the most recent progress value"), 6.4
// (the last checkpoint is the retry's).
func TestProgressLastReportBeforeNackIsKept(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"plastnack","retry":{"max_attempts":3}}}`)
		if r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
		j := fetchFrom(t, s, "plastnack")
		id := j["id"].(string)
		putClaimProgress(t, s, j, `{"progress":0.2,"data":{"step":2},"checkpoint":{"offset":2}}`)
		putClaimProgress(t, s, j, `{"progress":0.9,"data":{"step":9},"checkpoint":{"offset":9}}`)
		if n := nackFetched(t, s, j, `{"code":"x","message":"boom"}`); n.status != 200 || n.body["state"] != "retryable" {
			t.Fatalf("nack: %d %s", n.status, n.raw)
		}
		waitProgress(t, s, id, "the last progress report (0.9, step 9, checkpoint offset 9) kept after the nack",
			func(b map[string]any) bool {
				d, _ := b["data"].(map[string]any)
				cp, _ := b["last_checkpoint"].(map[string]any)
				return b["progress"] == 0.9 && d["step"] == 9.0 && cp["offset"] == 9.0
			})
	})
}

// TestProgressLastReportBeforeAckIsKept: the same on success. A worker reports {"phase":"a"} then,
// within the interval, {"phase":"done"} and acks: the completed job keeps {"phase":"done"}
// (ojs-progress.md 6.2, docs/http-api.md Progress: "the latest wins").
func TestProgressLastReportBeforeAckIsKept(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"plastack"}}`)
		if r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
		j := fetchFrom(t, s, "plastack")
		id := j["id"].(string)
		putClaimProgress(t, s, j, `{"progress":0.3,"data":{"phase":"a"}}`)
		putClaimProgress(t, s, j, `{"progress":0.95,"data":{"phase":"done"}}`)
		a := call(t, s, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q}`, id, j["claim_token"]))
		if a.status != 200 {
			t.Fatalf("ack: %d %s", a.status, a.raw)
		}
		waitProgress(t, s, id, "the last progress data ({\"phase\":\"done\"}) kept after the ack",
			func(b map[string]any) bool {
				d, _ := b["data"].(map[string]any)
				return b["state"] == "completed" && b["progress"] == 1.0 && d["phase"] == "done"
			})
	})
}

// TestProgressRetryStartsWithoutProgress: attempt 1 reports 0.2 then 0.9 (the 0.9 held back by the
// throttle) and hands the job back (nack requeue); attempt 2 is fetched and reports 0.1, which is
// its progress: the earlier attempt's 0.9 is not carried over (ojs-progress.md 5.3, docs/http-api.md
// "a retry starts without"). The nack writes attempt 1's held-back report first, so this holds
// however slow the machine; TestRemoteProgressNewClaimDropsHeldBack (root package) holds a report
// back across a change of claim that no outcome here announced.
func TestProgressRetryStartsWithoutProgress(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"pretry"}}`)
		if r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
		j := fetchFrom(t, s, "pretry")
		id := j["id"].(string)
		putClaimProgress(t, s, j, `{"progress":0.2}`)
		putClaimProgress(t, s, j, `{"progress":0.9,"data":{"run":1}}`)
		n := call(t, s, "POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"requeue":true}`, id, j["claim_token"]))
		if n.status != 200 || n.body["state"] != "available" {
			t.Fatalf("nack requeue: %d %s", n.status, n.raw)
		}
		j2 := fetchFrom(t, s, "pretry")
		if j2["id"] != id || j2["claim_token"] == j["claim_token"] {
			t.Fatalf("refetch: %v", j2)
		}
		putClaimProgress(t, s, j2, `{"progress":0.1,"data":{"run":2}}`)
		b := waitProgress(t, s, id, "progress of the second run", func(b map[string]any) bool { return b["progress"] != nil })
		if b["progress"] != 0.1 {
			t.Fatalf("the new run reported 0.1, but GET .../progress shows %v (the previous run's value): %v", b["progress"], b)
		}
	})
}

// TestProgressIsHeartbeatWithoutWorkerID: a worker fetches with a 3 s visibility timeout
// and no worker_id (the OJS fetch does not require one; pronto documents it as worker ""), then
// keeps reporting progress, naming its claim_token, every 250 ms for 7 s: each report extends the
// lease, so the job is still active on its first attempt (ojs-progress.md 6.3: "The backend MUST
// reset the job's visibility timeout as if a BEAT (heartbeat) had been received").
func TestProgressIsHeartbeatWithoutWorkerID(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"pbeat","retry":{"max_attempts":3}}}`)
		if r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
		var j map[string]any
		deadline := time.Now().Add(20 * time.Second)
		for j == nil {
			f := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["pbeat"],"visibility_timeout_ms":3000}`)
			if f.status != 200 {
				t.Fatalf("fetch: %d %s", f.status, f.raw)
			}
			if jobs, _ := f.body["jobs"].([]any); len(jobs) > 0 {
				j = jobs[0].(map[string]any)
			} else if time.Now().After(deadline) {
				t.Fatal("no job fetched")
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
		id := j["id"].(string)
		// Without worker_id: "claim_token" alone names the claim.
		for i := 1; i <= 28; i++ {
			p := call(t, s, "PUT", "/ojs/v1/jobs/"+id+"/progress", fmt.Sprintf(`{"progress":%g,"claim_token":%q}`, float64(i)/100, j["claim_token"]))
			if p.status != http.StatusNoContent {
				t.Fatalf("progress %d: %d %s", i, p.status, p.raw)
			}
			time.Sleep(250 * time.Millisecond)
		}
		g := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
		job, _ := g.body["job"].(map[string]any)
		if g.status != 200 || job["state"] != "active" || job["attempt"] != 1.0 {
			t.Fatalf("a job whose worker kept reporting progress (as a heartbeat) lost its claim: %d %s", g.status, g.raw)
		}
	})
}

// TestProgressEventNeverGoesBack: a worker reports 0.5, then (more than a progress interval
// later, so that both are written) 0.3 with new data. ojs-progress.md 5.1: "If a progress update
// reports a value lower than the previously reported value, the backend MUST ignore the update
// (retain the higher value)": the store keeps 0.5, and the progress.updated event (11.1) of the
// second write announces the job's progress, 0.5 with the new data, not the 0.3 sent.
func TestProgressEventNeverGoesBack(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		r := enqueueBody(t, s, `{"type":"a.b","args":[],"options":{"queue":"pevent"}}`)
		if r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
		j := fetchFrom(t, s, "pevent")
		id := j["id"].(string)
		putClaimProgress(t, s, j, `{"progress":0.5,"data":{"n":1}}`)
		waitProgress(t, s, id, "the first report written", func(b map[string]any) bool { return b["progress"] == 0.5 })
		time.Sleep(1500 * time.Millisecond) // past the throttle's interval: the next report is written at once
		putClaimProgress(t, s, j, `{"progress":0.3,"data":{"n":2}}`)
		b := waitProgress(t, s, id, "the second report's data written", func(b map[string]any) bool {
			d, _ := b["data"].(map[string]any)
			return d["n"] == 2.0
		})
		if b["progress"] != 0.5 {
			t.Fatalf("the stored progress went back: %v", b)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ev := call(t, s, "GET", "/ojs/v1/events?type=progress.updated", nil)
			if ev.status != 200 {
				t.Fatalf("events: %d %s", ev.status, ev.raw)
			}
			evs, _ := ev.body["events"].([]any)
			for _, e := range evs {
				d, _ := e.(map[string]any)["data"].(map[string]any)
				if pd, _ := d["data"].(map[string]any); d["job_id"] == id && pd["n"] == 2.0 {
					if p := d["progress"]; p != 0.5 {
						t.Fatalf("progress.updated of the second write says progress %v, but the job's progress is 0.5 (a lower report is ignored): %s", p, ev.raw)
					}
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress.updated event for the second write: %s", ev.raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
