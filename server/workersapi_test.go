package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestAdminWorkers, on every store: OJS workers are recorded by their fetches and heartbeats and
// listed with their queues, active jobs and state; quiet makes the worker's heartbeat answer
// "quiet" and its fetches empty, terminate "terminate"; only a stale worker can be deregistered,
// which fails its jobs' attempts so they are retried at once.
func TestAdminWorkers(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client, WorkerStaleAfter: 300 * time.Millisecond})
			held := enqueueJob(t, s, `{"type":"w.run","args":[],"options":{"queue":"wq","retry":{"max_attempts":3,"initial_interval_ms":1,"jitter":false}}}`)
			enqueueJob(t, s, `{"type":"w.run","args":[],"options":{"queue":"wq"}}`)
			jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"wq"}, "worker_id": "w-alpha"}).body["jobs"].([]any)
			if len(jobs) != 1 || jobs[0].(map[string]any)["id"] != held {
				t.Fatalf("fetch: %v", jobs)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": "w-beta"})

			list := mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers", nil)
			byID := map[string]map[string]any{}
			for _, it := range list.body["items"].([]any) {
				byID[it.(map[string]any)["id"].(string)] = it.(map[string]any)
			}
			a := byID["w-alpha"]
			if a == nil || a["kind"] != "remote" || a["state"] != "running" || a["active_jobs"] != 1.0 ||
				a["queues"].([]any)[0] != "wq" || a["last_heartbeat_at"] == nil || a["started_at"] == nil {
				t.Fatalf("w-alpha: %s", list.raw)
			}
			if b := byID["w-beta"]; b == nil || b["active_jobs"] != 0.0 || len(b["queues"].([]any)) != 0 {
				t.Fatalf("w-beta: %s", list.raw)
			}
			if sum := list.body["summary"].(map[string]any); sum["total"] != 3.0 || sum["running"] != 3.0 {
				t.Fatalf("summary: %s", list.raw)
			}
			one := mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers/w-alpha", nil)
			if ids := one.body["active_job_ids"].([]any); len(ids) != 1 || ids[0] != held {
				t.Fatalf("worker detail: %s", one.raw)
			}

			// Quiet: the heartbeat says so and fetches get nothing.
			q := mustCall(t, s, 200, "POST", "/ojs/v1/admin/workers/w-alpha/quiet", nil)
			if q.body["directive"] != "quiet" || q.body["state"] != "quiet" || q.body["directive_at"] == nil {
				t.Fatalf("quiet: %s", q.raw)
			}
			hb := mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": "w-alpha", "active_job_ids": []string{held}})
			if hb.body["state"] != "quiet" || len(hb.body["jobs_extended"].([]any)) != 1 {
				t.Fatalf("heartbeat of a quieted worker: %s", hb.raw)
			}
			if jobs := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"wq"}, "worker_id": "w-alpha"}).body["jobs"].([]any); len(jobs) != 0 {
				t.Fatalf("a quieted worker fetched %v", jobs)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/workers/w-beta/terminate", nil)
			if hb := mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", map[string]any{"worker_id": "w-beta"}); hb.body["state"] != "terminate" {
				t.Fatalf("heartbeat of a terminated worker: %s", hb.raw)
			}

			// Deregistration: refused while the worker is heard from; a stale one loses its record
			// and its job goes back for another attempt.
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/workers/w-alpha", nil), 409, CodeConflict)
			ws := s.store.(store.WorkerStore)
			deadline := time.Now().Add(15 * time.Second)
			for mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers/w-alpha", nil).body["state"] != "stale" {
				if time.Now().After(deadline) {
					t.Fatal("w-alpha never went stale")
				}
				time.Sleep(20 * time.Millisecond)
			}
			d := mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/workers/w-alpha", nil)
			if d.body["deregistered"] != true || d.body["jobs_rescheduled"] != 1.0 {
				t.Fatalf("deregister: %s", d.raw)
			}
			if _, err := ws.GetWorker(context.Background(), "w-alpha"); err == nil {
				t.Fatal("the record stayed")
			}
			job := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+held, nil).body["job"].(map[string]any)
			if job["state"] == "active" || job["errors"].([]any)[0].(map[string]any)["type"] != "worker_deregistered" {
				t.Fatalf("the deregistered worker's job: %v", job)
			}

			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/workers/nobody", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/workers/nobody/quiet", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/workers/nobody", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/workers/w-beta", nil), 405, CodeMethodNotAllowed)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/workers/w-beta/quiet", nil), 405, CodeMethodNotAllowed)
		})
	}
}

// TestAdminSystemConfig: GET /ojs/v1/admin/system/config answers the server's settings and never
// the API key.
func TestAdminSystemConfig(t *testing.T) {
	s, _ := newTestServer(t, Config{APIKey: "sekrit-key", WorkerStaleAfter: time.Minute})
	r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/system/config", nil, "Authorization", "Bearer sekrit-key")
	if r.body["api_key_required"] != true || r.body["backend"] != "memory" || r.body["worker_stale_after_ms"] != 60000.0 ||
		r.body["version"] != Version || r.body["extensions"] == nil {
		t.Fatalf("config: %s", r.raw)
	}
	if strings.Contains(string(r.raw), "sekrit") {
		t.Fatalf("the key leaked: %s", r.raw)
	}
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/system/config", nil), 401, CodeUnauthenticated)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/system/nothing", nil, "Authorization", "Bearer sekrit-key"), 404, CodeNotFound)
}

// TestAdminTerminatedWorkerGoesStale: a worker told to terminate, which then exits, is listed
// "stale" once unheard past WorkerStaleAfter, as DELETE (which takes only stale workers) sees it.
func TestAdminTerminatedWorkerGoesStale(t *testing.T) {
	stale := 300 * time.Millisecond
	s, _ := newTestServer(t, Config{WorkerStaleAfter: stale})
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"wq"}, "worker_id": "term-w1"})
	item := mustCall(t, s, 200, "POST", "/ojs/v1/admin/workers/term-w1/terminate", nil).body
	if item["state"] != "terminating" {
		t.Fatalf("just told to terminate: state %v", item["state"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		item = mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers/term-w1", nil).body
		last, err := time.Parse(time.RFC3339Nano, item["last_heartbeat_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(last) > 2*stale || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	summary := mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers", nil).body["summary"].(map[string]any)
	if item["state"] != "stale" || summary["stale"] != 1.0 || summary["terminating"] != 0.0 {
		t.Errorf("worker unheard for more than %s: state %v, summary %v (want stale)", stale, item["state"], summary)
	}
	mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/workers/term-w1", nil)
}

// TestAdminStatsCountsListedWorkers, on every store: /admin/stats "workers" counts what
// /admin/workers lists (an idle OJS worker on record and the server's own client included).
func TestAdminStatsCountsListedWorkers(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"wq"}, "worker_id": "idle-w1"})
			list := mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers", nil)
			stats := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats", nil)
			summary := list.body["summary"].(map[string]any)
			if summary["total"] != 2.0 || stats.body["workers"] != summary["total"] {
				t.Fatalf("/admin/stats workers=%v, /admin/workers summary %v (want both 2): %s", stats.body["workers"], summary, list.raw)
			}
		})
	}
}
