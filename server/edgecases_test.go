package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Edge cases of the HTTP API found by an audit of unusual input; each test once failed on at least
// one store.

// serverOn returns a Server over a fresh store of the given kind (openStore: Redis included,
// PostgreSQL on a small pool) and a started insert-only client.
func serverOn(t *testing.T, kind string) *Server {
	t.Helper()
	st := openStore(t, kind)
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	return s
}

// TestCronNeverOccurringRefused: a cron expression whose fields never meet ("0 0 30 2 *", February
// 30th) is refused with 400 naming expression. It used to be registered with next_run_at
// 0001-01-01, due at once, and the scheduler fired it on every tick.
func TestCronNeverOccurringRefused(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"feb30","expression":"0 0 30 2 *","job_template":{"type":"a.b","args":[],"options":{"queue":"feb30"}}}`)
			if r.status == 400 {
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "expression" {
					t.Fatalf("the refusal names %v, not expression: %s", f, r.raw)
				}
				return
			}
			if r.status != 201 {
				t.Fatalf("register: %d %s", r.status, r.raw)
			}
			c := r.body["cron"].(map[string]any)
			if next, _ := c["next_run_at"].(string); next != "" {
				if at, err := time.Parse(time.RFC3339Nano, next); err == nil && at.Before(time.Now().Add(-time.Minute)) {
					t.Errorf("a schedule that never fires has next_run_at %s (in the past, so due at once)", next)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.RunCron(ctx) }()
			deadline := time.Now().Add(3 * time.Second)
			fired := ""
			for time.Now().Before(deadline) && fired == "" {
				time.Sleep(200 * time.Millisecond)
				q := call(t, s, "GET", "/ojs/v1/admin/jobs?queue=feb30", nil)
				if items, _ := q.body["items"].([]any); len(items) > 0 {
					fired = string(q.raw)
				}
			}
			cancel()
			<-done
			if fired != "" {
				t.Errorf("the scheduler fired a schedule for February 30th: %s", fired)
			}
		})
	}
}

// TestBatchDuplicateIDNamed: a batch refused because one of its jobs has the id of a stored job
// answers 409 duplicate naming that id (it named ""), and a batch that gives one id to two of its
// jobs is a 400 naming the second.
func TestBatchDuplicateIDNamed(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			const id = "01900000-0000-7000-8000-0000000000a1"
			if r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[1],"id":"`+id+`"}`); r.status != 201 {
				t.Fatalf("enqueue: %d %s", r.status, r.raw)
			}
			r := call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[2]},{"type":"a.b","args":[3],"id":"`+id+`"}]}`)
			checkErrorBody(t, r, 409, CodeDuplicate)
			msg := r.body["error"].(map[string]any)["message"].(string)
			if !strings.Contains(msg, id) {
				t.Fatalf("the duplicate-id error does not name the id %s: %s", id, r.raw)
			}
			const twice = "01900000-0000-7000-8000-0000000000a2"
			r = call(t, s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[2],"id":"`+twice+`"},{"type":"a.b","args":[3],"id":"`+twice+`"}]}`)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "jobs[1].id" {
				t.Fatalf("an id given twice in a batch: field %v: %s", f, r.raw)
			}
			if g := call(t, s, "GET", "/ojs/v1/jobs/"+twice, nil); g.status != 404 {
				t.Fatalf("a refused batch stored a job: %d %s", g.status, g.raw)
			}
		})
	}
}

// randomName is n pseudo-random letters and digits (incompressible enough that PostgreSQL cannot fit
// it in an index row).
func randomName(n int) string {
	var sb strings.Builder
	x := uint32(12345)
	for i := 0; i < n; i++ {
		x = x*1664525 + 1013904223
		sb.WriteByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x>>24)%62])
	}
	return sb.String()
}

// TestHeartbeatWorkerIDBound: worker_id is at most 255 bytes (docs/http-api.md, "Sizes") in a
// heartbeat as in a fetch.
func TestHeartbeatWorkerIDBound(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			wid := strings.Repeat("w", 256)
			f := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["q"],"worker_id":"`+wid+`"}`)
			checkErrorBody(t, f, 400, CodeInvalidRequest)
			r := call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wid+`","active_jobs":0}`)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
		})
	}
}

// TestLongWorkerIDStoresAgree: a worker_id too long for PostgreSQL's index is refused by every store
// alike. It used to be accepted by the heartbeat and recorded everywhere but PostgreSQL, whose
// admin API then answered 404 for it.
func TestLongWorkerIDStoresAgree(t *testing.T) {
	wid := randomName(6000)
	got := map[string]string{}
	for _, kind := range storeKinds {
		s := serverOn(t, kind)
		h := call(t, s, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wid+`","active_jobs":0}`)
		g := call(t, s, "GET", "/ojs/v1/admin/workers/"+wid, nil)
		q := call(t, s, "POST", "/ojs/v1/admin/workers/"+wid+"/quiet", nil)
		got[kind] = fmt.Sprintf("heartbeat %d, GET worker %d, quiet %d", h.status, g.status, q.status)
		checkErrorBody(t, h, 400, CodeInvalidRequest)
		checkErrorBody(t, g, 400, CodeInvalidRequest)
	}
	for _, kind := range storeKinds[1:] {
		if got[kind] != got["memory"] {
			t.Errorf("%s: %s; memory: %s", kind, got[kind], got["memory"])
		}
	}
}

// TestRequeueAtMaxAttempts: a nack with "requeue": true gives the attempt back by raising
// max_attempts; at the largest max_attempts the API accepts (2^31-1) it stays there on every store.
// PostgreSQL used to fail with "integer out of range" and leave the job active; the others went to
// 2^31.
func TestRequeueAtMaxAttempts(t *testing.T) {
	got := map[string]string{}
	for _, kind := range storeKinds {
		s := serverOn(t, kind)
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"r","retry":{"max_attempts":2147483647}}}`)
		if r.status != 201 {
			t.Fatalf("%s: enqueue: %d %s", kind, r.status, r.raw)
		}
		f := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["r"],"worker_id":"w"}`)
		jobs, _ := f.body["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("%s: fetch: %s", kind, f.raw)
		}
		j := jobs[0].(map[string]any)
		id, tok := j["id"].(string), j["claim_token"].(string)
		n := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w","claim_token":"`+tok+`","requeue":true}`)
		g := call(t, s, "GET", "/ojs/v1/jobs/"+id, nil)
		gj := g.body["job"].(map[string]any)
		got[kind] = fmt.Sprintf("requeue %d, then the job is %v", n.status, gj["state"])
		if n.status != 200 || gj["state"] != "available" || gj["max_attempts"] != float64(1<<31-1) {
			t.Errorf("%s: requeue %d %s; then %s", kind, n.status, n.raw, g.raw)
		}
		if n.status >= 300 {
			got[kind] += fmt.Sprintf(" (%s)", n.body["error"].(map[string]any)["message"])
		}
	}
	for _, kind := range storeKinds[1:] {
		if got[kind] != got["memory"] {
			t.Errorf("%s: %s; memory: %s", kind, got[kind], got["memory"])
		}
	}
}

// TestDeadLetterRetryOverrideReservedMeta: meta key "_pronto" (where pronto keeps a job's visibility
// timeout and unknown attributes) is refused in a dead-letter retry's override.meta as at enqueue;
// it used to replace what pronto kept there.
func TestDeadLetterRetryOverrideReservedMeta(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"_pronto":{"vt":1}}}`), 400, CodeInvalidRequest)
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"x_attr":"keep","options":{"queue":"o","visibility_timeout_ms":60000,"retry":{"max_attempts":1}}}`)
			id := r.body["job"].(map[string]any)["id"].(string)
			call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["o"],"worker_id":"w"}`)
			if n := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w","error":{"message":"x"}}`); n.body["state"] != "discarded" {
				t.Fatalf("nack: %s", n.raw)
			}
			r = call(t, s, "POST", "/ojs/v1/dead-letter/"+id+"/retry", `{"override":{"meta":{"_pronto":{"vt":1,"x":{"injected":1}}}}}`)
			if r.status == 400 {
				return
			}
			t.Errorf("override.meta with the reserved key %q: %d, want 400 invalid_request: %s", "_pronto", r.status, r.raw)
			if j, ok := r.body["job"].(map[string]any); ok {
				if j["visibility_timeout_ms"] != float64(60000) || j["x_attr"] != "keep" || j["injected"] != nil {
					t.Errorf("the retried job lost what pronto keeps in meta: visibility_timeout_ms %v, x_attr %v, injected %v",
						j["visibility_timeout_ms"], j["x_attr"], j["injected"])
				}
			}
		})
	}
}

// TestEscapedReservedMetaKey: the reserved meta key written with an escape ("\u005fpronto") is
// refused too; it used to pass the check, and PostgreSQL's jsonb then decoded it into the reserved
// key while the other stores kept it as written.
func TestEscapedReservedMetaKey(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":{"\u005fpronto":{"vt":1,"x":{"injected":1}}}}`)
			if r.status == 400 {
				return
			}
			msg := fmt.Sprintf("meta key \"\\u005fpronto\" (the reserved \"_pronto\"): %d, want 400: %s", r.status, r.raw)
			if j, ok := r.body["job"].(map[string]any); ok {
				g := call(t, s, "GET", "/ojs/v1/jobs/"+j["id"].(string), nil)
				gj := g.body["job"].(map[string]any)
				msg += fmt.Sprintf("; read back: visibility_timeout_ms=%v injected=%v meta=%v", gj["visibility_timeout_ms"], gj["injected"], gj["meta"])
			}
			t.Error(msg)
		})
	}
}

// TestOptionsPriorityZeroWins: options.priority wins over a top-level priority (docs/http-api.md,
// Enqueue), 0 included; 0 used to count as "not set".
func TestOptionsPriorityZeroWins(t *testing.T) {
	s := serverOn(t, "memory")
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"priority":5,"options":{"priority":0}}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	if p := r.body["job"].(map[string]any)["priority"]; p != float64(0) {
		t.Fatalf("options.priority 0 did not win over the top-level priority 5: priority %v", p)
	}
}

// TestWorkerPathIDUnstorable: a worker id in the admin URL path with a NUL or bytes that are not
// UTF-8 is a 400 naming worker_id on every store, before any store sees it (docs/http-api.md, "Input
// every store can hold"). PostgreSQL used to answer its own 400 without a field, the others 404.
func TestWorkerPathIDUnstorable(t *testing.T) {
	got := map[string]string{}
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			var out []string
			for _, p := range []string{"GET /ojs/v1/admin/workers/a%00b", "GET /ojs/v1/admin/workers/a%FFb", "DELETE /ojs/v1/admin/workers/a%00b", "POST /ojs/v1/admin/workers/a%00b/quiet"} {
				method, path, _ := strings.Cut(p, " ")
				r := call(t, s, method, path, nil)
				out = append(out, fmt.Sprintf("%s: %d", p, r.status))
				e, _ := r.body["error"].(map[string]any)
				d, _ := e["details"].(map[string]any)
				if r.status != 400 || e["code"] != CodeInvalidRequest || d["field"] == nil {
					t.Errorf("%s: %d, want 400 invalid_request naming the field: %s", p, r.status, strings.ToValidUTF8(string(r.raw), "?"))
				}
			}
			got[kind] = strings.Join(out, ", ")
		})
	}
	for _, kind := range storeKinds[1:] {
		if got[kind] != got["memory"] {
			t.Errorf("stores disagree: %s: %s; memory: %s", kind, got[kind], got["memory"])
		}
	}
}
