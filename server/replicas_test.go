package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// replicaKinds are the shared stores several replicas run on.
var replicaKinds = []string{"postgres", "redis", "sqlite"}

// replicaStores opens n store handles on ONE shared backend of kind (one PostgreSQL schema,
// one Redis prefix, one SQLite file), as n `pronto serve` processes would.
func replicaStores(t *testing.T, kind string, n int) []store.Store {
	t.Helper()
	ctx := context.Background()
	out := make([]store.Store, 0, n)
	switch kind {
	case "postgres":
		schema := testdb.Schema(t)
		for range n {
			s, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
	case "sqlite":
		path := filepath.Join(t.TempDir(), "jobs.db")
		for range n {
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
	case "redis":
		prefix := redistest.KeyPrefix(t)
		for range n {
			rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(), PoolSize: 4, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			s, err := redis.New(ctx, rdb, redis.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	for _, s := range out {
		s := s
		t.Cleanup(func() { _ = s.Close() })
	}
	if err := out[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// replicaServers starts n OJS servers, each over its own client and store handle, all on one
// backend of kind.
func replicaServers(t *testing.T, kind string, n int, cfg Config) []*Server {
	t.Helper()
	var out []*Server
	for _, st := range replicaStores(t, kind, n) {
		c, err := pronto.NewClient(st, &pronto.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Client = c
		s, _ := newTestServer(t, cfg)
		out = append(out, s)
	}
	return out
}

// replicaFetch fetches up to count jobs of queue through s as worker.
func replicaFetch(t *testing.T, s *Server, queue, worker string, count int) []map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch",
		fmt.Sprintf(`{"queues":[%q],"worker_id":%q,"count":%d}`, queue, worker, count))
	var out []map[string]any
	for _, j := range r.body["jobs"].([]any) {
		out = append(out, j.(map[string]any))
	}
	return out
}

// replicaEventually polls cond until it holds or 15 s pass.
func replicaEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	replicaWithin(t, 15*time.Second, what, cond)
}

// replicaPoll polls cond until it holds (true) or d passes (false).
// replicaWithin polls cond until it holds or d passes.
func replicaWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaGated is a PostgreSQL store whose GetSetting of one key, in a request marked by
// replicaCall, stops after its read until released: it holds one replica between the read
// and the write of a read-modify-write, deterministically.
// arm makes the (skip+1)th marked read of key wait for release.
// replicaGatedPair returns two servers on one PostgreSQL schema, the second over a gated store.
// replicaCall is call, with the request marked for the gate.
func replicaCall(t *testing.T, s *Server, method, path, body string) (int, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req = req.WithContext(context.WithValue(req.Context(), replicaMark{}, true))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestReplicasCrossReplicaWorkerCycle: fetch through one replica, heartbeat, progress, nack and
// ack through another (ids and claim tokens sent, as the docs require).
func TestReplicasCrossReplicaWorkerCycle(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			a, b := ss[0], ss[1]
			id := enqueueJob(t, a, `{"type":"m.cycle","args":[],"options":{"queue":"mcyc","retry":{"max_attempts":3,"initial_interval":"PT0.001S","jitter":false}}}`)
			jobs := replicaFetch(t, a, "mcyc", "w1", 1)
			if len(jobs) != 1 {
				t.Fatalf("fetch: %v", jobs)
			}
			tok := jobs[0]["claim_token"].(string)
			hb := mustCall(t, b, 200, "POST", "/ojs/v1/workers/heartbeat",
				fmt.Sprintf(`{"worker_id":"w1","active_job_ids":[%q],"active_jobs":1,"visibility_timeout_ms":60000}`, id))
			if lost, _ := hb.body["jobs_lost"].([]any); len(lost) != 0 {
				t.Fatalf("heartbeat through another replica lost the job: %s", hb.raw)
			}
			mustCall(t, b, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress",
				fmt.Sprintf(`{"progress":0.5,"worker_id":"w1","claim_token":%q}`, tok))
			replicaEventually(t, "progress visible through a", func() bool {
				r := mustCall(t, a, 200, "GET", "/ojs/v1/jobs/"+id+"/progress", nil)
				return r.body["progress"] == 0.5
			})
			n := mustCall(t, b, 200, "POST", "/ojs/v1/workers/nack",
				fmt.Sprintf(`{"job_id":%q,"worker_id":"w1","claim_token":%q,"error":{"code":"x","message":"boom"}}`, id, tok))
			if n.body["state"] != "retryable" && n.body["state"] != "available" {
				t.Fatalf("nack through b: %s", n.raw)
			}
			var j2 []map[string]any
			replicaEventually(t, "refetch through b", func() bool {
				j2 = replicaFetch(t, b, "mcyc", "w2", 1)
				return len(j2) == 1
			})
			tok2 := j2[0]["claim_token"].(string)
			// The old claim is refused through either replica.
			checkErrorBody(t, call(t, a, "POST", "/ojs/v1/workers/ack",
				fmt.Sprintf(`{"job_id":%q,"worker_id":"w1","claim_token":%q}`, id, tok)), 409, "")
			r := mustCall(t, a, 200, "POST", "/ojs/v1/workers/ack",
				fmt.Sprintf(`{"job_id":%q,"worker_id":"w2","claim_token":%q,"result":{"ok":1}}`, id, tok2))
			if r.body["state"] != "completed" {
				t.Fatalf("ack: %s", r.raw)
			}
			g := mustCall(t, b, 200, "GET", "/ojs/v1/jobs/"+id, nil)
			if g.body["job"].(map[string]any)["state"] != "completed" {
				t.Fatalf("job through b: %s", g.raw)
			}
		})
	}
}

// TestReplicasSettingsPropagate: settings changed through one replica apply through another
// within their documented delay (polled, bounded at 15 s).
func TestReplicasSettingsPropagate(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			a, b := ss[0], ss[1]

			// Pause through a: b's fetch gets nothing; resume through a: b gets it.
			enqueueJob(t, a, `{"type":"m.p","args":[],"options":{"queue":"mpause"}}`)
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/queues/mpause/pause", nil)
			if got := replicaFetch(t, b, "mpause", "w", 1); len(got) != 0 {
				t.Fatalf("b fetched from a queue paused through a: %v", got)
			}
			q := mustCall(t, b, 200, "GET", "/ojs/v1/admin/queues/mpause", nil)
			if q.body["paused"] != true && q.body["state"] != "paused" {
				t.Fatalf("b shows the queue paused through a as %s", q.raw)
			}
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/queues/mpause/resume", nil)
			replicaEventually(t, "b fetches after resume through a", func() bool {
				return len(replicaFetch(t, b, "mpause", "w", 1)) == 1
			})

			// Backpressure bound set through a holds on b.
			mustCall(t, a, 200, "PUT", "/ojs/v1/admin/queues/mbp/config", `{"backpressure":{"max_depth":1}}`)
			enqueueJob(t, a, `{"type":"m.bp","args":[],"options":{"queue":"mbp"}}`)
			replicaEventually(t, "b refuses beyond the bound set through a", func() bool {
				r := call(t, b, "POST", "/ojs/v1/jobs", `{"type":"m.bp","args":[],"options":{"queue":"mbp"}}`)
				return r.status == 429
			})

			// Schema registered through a applies on b.
			mustCall(t, a, 201, "POST", "/ojs/v1/schemas",
				`{"uri":"urn:m:s:1","type":"m.schema","version":1,"schema":{"type":"array","items":{"type":"integer"}}}`)
			replicaEventually(t, "b validates against the schema registered through a", func() bool {
				r := call(t, b, "POST", "/ojs/v1/jobs", `{"type":"m.schema","args":["x"],"options":{"queue":"msch"}}`)
				return r.status == 422
			})

			// Worker directive given through a reaches the worker heartbeating through b.
			mustCall(t, b, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wd","active_job_ids":[],"active_jobs":0}`)
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/workers/wd/quiet", nil)
			replicaEventually(t, "b's heartbeat answers quiet", func() bool {
				r := mustCall(t, b, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wd","active_job_ids":[],"active_jobs":0}`)
				return r.body["state"] == "quiet"
			})
			enqueueJob(t, a, `{"type":"m.q","args":[],"options":{"queue":"mquiet"}}`)
			if got := replicaFetch(t, b, "mquiet", "wd", 1); len(got) != 0 {
				t.Fatalf("a quiet worker fetched through b: %v", got)
			}

			// Maintenance mode through a: b's fetch answers nothing.
			enqueueJob(t, a, `{"type":"m.m","args":[],"options":{"queue":"mmaint"}}`)
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"x"}`)
			replicaEventually(t, "b honours maintenance", func() bool {
				r := mustCall(t, b, 200, "GET", "/ojs/v1/admin/system/maintenance", nil)
				return r.body["maintenance"] == true
			})
			if got := replicaFetch(t, b, "mmaint", "w", 1); len(got) != 0 {
				t.Fatalf("b fetched during maintenance enabled through a: %v", got)
			}
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
			replicaEventually(t, "b fetches after maintenance ends", func() bool {
				return len(replicaFetch(t, b, "mmaint", "w", 1)) == 1
			})

			// Tenant priority boost through a applies to b's enqueues.
			mustCall(t, a, 200, "PUT", "/ojs/v1/admin/tenants/acme", `{"priority_boost":10}`)
			replicaEventually(t, "b applies the boost set through a", func() bool {
				r := mustCall(t, b, 201, "POST", "/ojs/v1/jobs", `{"type":"m.t","args":[],"meta":{"tenant_id":"acme"},"options":{"queue":"mten"}}`)
				return r.body["job"].(map[string]any)["priority"] == 10.0
			})
		})
	}
}

// TestReplicasConcurrentLimits: unique keys and rate-limit concurrency hold across three
// replicas hammered at once.
func TestReplicasConcurrentLimits(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 3, Config{})

			// Unique reject: exactly one 201 among concurrent enqueues through every replica.
			for round := range 5 {
				body := fmt.Sprintf(`{"type":"m.u","args":[%d],"options":{"queue":"muniq","unique":{"keys":["type","queue","args"],"on_conflict":"reject"}}}`, round)
				var mu sync.Mutex
				codes := map[int]int{}
				var wg sync.WaitGroup
				for i := range 9 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := call(t, ss[i%3], "POST", "/ojs/v1/jobs", body)
						mu.Lock()
						codes[r.status]++
						mu.Unlock()
					}()
				}
				wg.Wait()
				if codes[201] != 1 || codes[409] != 8 {
					t.Fatalf("round %d: unique reject across replicas answered %v", round, codes)
				}
			}

			// Unique ignore: everyone gets the same job.
			{
				body := `{"type":"m.ui","args":[],"options":{"queue":"muniq","unique":{"keys":["type","queue"],"on_conflict":"ignore"}}}`
				var mu sync.Mutex
				ids := map[string]int{}
				var wg sync.WaitGroup
				for i := range 9 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := call(t, ss[i%3], "POST", "/ojs/v1/jobs", body)
						if r.status != 201 && r.status != 200 {
							t.Errorf("ignore: %d %s", r.status, r.raw)
							return
						}
						mu.Lock()
						ids[r.body["job"].(map[string]any)["id"].(string)]++
						mu.Unlock()
					}()
				}
				wg.Wait()
				if len(ids) != 1 {
					t.Fatalf("unique ignore across replicas stored %d jobs: %v", len(ids), ids)
				}
			}

			// Unique replace: afterwards exactly one job of the key is not cancelled.
			{
				body := `{"type":"m.ur","args":[],"options":{"queue":"murep","unique":{"keys":["type","queue"],"on_conflict":"replace"}}}`
				var wg sync.WaitGroup
				for i := range 9 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := call(t, ss[i%3], "POST", "/ojs/v1/jobs", body)
						if r.status != 201 {
							t.Errorf("replace: %d %s", r.status, r.raw)
						}
					}()
				}
				wg.Wait()
				r := mustCall(t, ss[0], 200, "GET", "/ojs/v1/admin/jobs?queue=murep&state=available,scheduled,active,retryable,pending&per_page=100", nil)
				if n := len(r.body["items"].([]any)); n != 1 {
					t.Fatalf("unique replace across replicas left %d live holders: %s", n, r.raw)
				}
			}

			// Rate-limit concurrency 1 across replicas: never two active.
			for i := range 6 {
				enqueueJob(t, ss[i%3], `{"type":"m.rl","args":[],"options":{"queue":"mrl","rate_limit":{"key":"mkey","concurrency":1}}}`)
			}
			var mu sync.Mutex
			var got []map[string]any
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := call(t, ss[i%3], "POST", "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":["mrl"],"worker_id":"w%d","count":3}`, i))
					if r.status != 200 {
						t.Errorf("fetch: %d %s", r.status, r.raw)
						return
					}
					mu.Lock()
					for _, j := range r.body["jobs"].([]any) {
						got = append(got, j.(map[string]any))
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			if len(got) != 1 {
				t.Fatalf("concurrency 1 across replicas handed out %d jobs", len(got))
			}
		})
	}
}

// TestReplicasCronOnce: a schedule registered through one replica fires each occurrence once
// across three replicas running cron, including across the leader's graceful shutdown.
func TestReplicasCronOnce(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ss := replicaServers(t, kind, 3, Config{})
			cancels := make([]context.CancelFunc, 3)
			dones := make([]chan struct{}, 3)
			for i, s := range ss {
				ctx, cancel := context.WithCancel(context.Background())
				cancels[i] = cancel
				dones[i] = make(chan struct{})
				go func() { defer close(dones[i]); _ = s.RunCron(ctx) }()
			}
			t.Cleanup(func() {
				for i := range cancels {
					cancels[i]()
					<-dones[i]
				}
			})
			mustCall(t, ss[1], 201, "POST", "/ojs/v1/cron",
				`{"name":"mcron","expression":"@every 1s","overlap_policy":"allow","job_template":{"type":"m.cron","args":[],"options":{"queue":"mcronq"}}}`)
			list := func() []any {
				r := mustCall(t, ss[2], 200, "GET", "/ojs/v1/admin/jobs?queue=mcronq&per_page=100", nil)
				return r.body["items"].([]any)
			}
			replicaWithin(t, 60*time.Second, "3 occurrences", func() bool { return len(list()) >= 3 })
			// Shut every replica's cron down but the last, one by one.
			cancels[0]()
			<-dones[0]
			n := len(list())
			replicaWithin(t, 60*time.Second, "3 more occurrences after replica 0 stopped", func() bool { return len(list()) >= n+3 })
			cancels[1]()
			<-dones[1]
			n = len(list())
			replicaWithin(t, 60*time.Second, "3 more occurrences after replica 1 stopped", func() bool { return len(list()) >= n+3 })
			seen := map[string]string{}
			for _, it := range list() {
				j := it.(map[string]any)
				meta, _ := j["meta"].(map[string]any)
				at, _ := meta["cron_triggered_at"].(string)
				if prev, ok := seen[at]; ok {
					t.Fatalf("occurrence %s fired twice: jobs %s and %s", at, prev, j["id"])
				}
				seen[at] = j["id"].(string)
			}
		})
	}
}

// TestReplicasStreamAndWorkflow: a progress stream opened on one replica follows a job worked
// through another to its end; a chain and a batch with callbacks advance when their steps are
// acked through alternating replicas.
func TestReplicasStreamAndWorkflow(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			a, b := ss[0], ss[1]

			// Progress stream on b, worker on a.
			hs := httptest.NewServer(b)
			defer hs.Close()
			id := enqueueJob(t, a, `{"type":"m.s","args":[],"options":{"queue":"mstream"}}`)
			resp, err := http.Get(hs.URL + "/ojs/v1/jobs/" + id + "/progress/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			events := readEvents(t, resp)
			j := replicaFetch(t, a, "mstream", "w1", 1)[0]
			tok := j["claim_token"].(string)
			mustCall(t, a, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress", fmt.Sprintf(`{"progress":0.4,"worker_id":"w1","claim_token":%q}`, tok))
			if ev := nextEvent(t, events); ev.name != "progress" || ev.data["progress"] != 0.4 {
				t.Fatalf("stream on b: first event %+v", ev)
			}
			mustCall(t, a, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w1","claim_token":%q}`, id, tok))
			for {
				ev := nextEvent(t, events)
				if ev.name == "progress" {
					continue
				}
				if ev.name != "completed" {
					t.Fatalf("stream on b ended with %+v", ev)
				}
				break
			}

			// A chain, stepped through alternating replicas.
			r := mustCall(t, a, 201, "POST", "/ojs/v1/workflows", `{"type":"chain","name":"mc","options":{"queue":"mwf"},
				"steps":[{"type":"s1","args":[]},{"type":"s2","args":[]},{"type":"s3","args":[]}]}`)
			wf := r.body["workflow"].(map[string]any)["id"].(string)
			for i := range 3 {
				fs, as := ss[i%2], ss[(i+1)%2]
				var js []map[string]any
				replicaEventually(t, fmt.Sprintf("step %d available", i+1), func() bool {
					js = replicaFetch(t, fs, "mwf", "w", 1)
					return len(js) == 1
				})
				if want := fmt.Sprintf("s%d", i+1); js[0]["type"] != want {
					t.Fatalf("step %d: fetched %v", i+1, js[0]["type"])
				}
				if i > 0 {
					pr, _ := js[0]["parent_results"].([]any)
					if len(pr) != 1 || pr[0].(map[string]any)["n"] != float64(i) {
						t.Fatalf("step %d parent_results %v", i+1, js[0]["parent_results"])
					}
				}
				mustCall(t, as, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"result":{"n":%d}}`,
					js[0]["id"], js[0]["claim_token"], i+1))
			}
			for _, s := range ss {
				g := mustCall(t, s, 200, "GET", "/ojs/v1/workflows/"+wf, nil)
				if w := g.body["workflow"].(map[string]any); w["state"] != "completed" {
					t.Fatalf("chain through replicas: %s", g.raw)
				}
			}

			// A batch with callbacks: jobs acked through different replicas, concurrently.
			r = mustCall(t, b, 201, "POST", "/ojs/v1/workflows", `{"type":"batch","name":"mb","options":{"queue":"mbat"},
				"jobs":[{"type":"b1","args":[]},{"type":"b2","args":[]},{"type":"b3","args":[]},{"type":"b4","args":[]}],
				"callbacks":{"on_success":{"type":"cb.ok","args":[],"options":{"queue":"mcb"}},"on_complete":{"type":"cb.done","args":[],"options":{"queue":"mcb"}}}}`)
			wf = r.body["workflow"].(map[string]any)["id"].(string)
			js := replicaFetch(t, a, "mbat", "w", 4)
			if len(js) != 4 {
				t.Fatalf("batch fetch: %d", len(js))
			}
			var wg sync.WaitGroup
			for i, j := range js {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := call(t, ss[i%2], "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"result":%d}`, j["id"], j["claim_token"], i))
					if r.status != 200 {
						t.Errorf("ack: %d %s", r.status, r.raw)
					}
				}()
			}
			wg.Wait()
			var cbs []map[string]any
			replicaEventually(t, "both callbacks released", func() bool {
				cbs = append(cbs, replicaFetch(t, b, "mcb", "w", 2)...)
				return len(cbs) >= 2
			})
			if len(cbs) != 2 {
				t.Fatalf("callbacks: %d", len(cbs))
			}
			for _, c := range cbs {
				mustCall(t, a, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q}`, c["id"], c["claim_token"]))
			}
			replicaEventually(t, "batch completed", func() bool {
				g := mustCall(t, a, 200, "GET", "/ojs/v1/workflows/"+wf, nil)
				return g.body["workflow"].(map[string]any)["state"] == "completed"
			})
		})
	}
}

// TestReplicasRateSlotFreedElsewhere: a concurrency slot taken by a fetch through one replica is
// freed by the ack, nack or heartbeat-expiry handled through another, at once.
func TestReplicasRateSlotFreedElsewhere(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			a, b := ss[0], ss[1]
			for range 4 {
				enqueueJob(t, a, `{"type":"m.rs","args":[],"options":{"queue":"mrs","retry":{"max_attempts":1},"rate_limit":{"key":"mrs-key","concurrency":1}}}`)
			}
			// ack through b
			j := replicaFetch(t, a, "mrs", "w", 1)
			if len(j) != 1 {
				t.Fatal("first fetch")
			}
			if got := replicaFetch(t, b, "mrs", "w", 1); len(got) != 0 {
				t.Fatalf("second job handed out while the slot is held")
			}
			mustCall(t, b, 200, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q}`, j[0]["id"], j[0]["claim_token"]))
			j = replicaFetch(t, a, "mrs", "w", 1)
			if len(j) != 1 {
				rl := mustCall(t, a, 200, "GET", "/ojs/v1/rate-limits/mrs-key", nil)
				t.Fatalf("after an ack through b, a's fetch got nothing: %s", rl.raw)
			}
			// nack (discarding) through b
			mustCall(t, b, 200, "POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"error":{"message":"x"}}`, j[0]["id"], j[0]["claim_token"]))
			j = replicaFetch(t, a, "mrs", "w", 1)
			if len(j) != 1 {
				rl := mustCall(t, a, 200, "GET", "/ojs/v1/rate-limits/mrs-key", nil)
				t.Fatalf("after a nack through b, a's fetch got nothing: %s", rl.raw)
			}
			// cancel through b
			mustCall(t, b, 200, "DELETE", "/ojs/v1/jobs/"+j[0]["id"].(string), nil)
			j = replicaFetch(t, a, "mrs", "w", 1)
			if len(j) != 1 {
				rl := mustCall(t, a, 200, "GET", "/ojs/v1/rate-limits/mrs-key", nil)
				t.Fatalf("after a cancel through b, a's fetch got nothing: %s", rl.raw)
			}
			rl := mustCall(t, b, 200, "GET", "/ojs/v1/rate-limits/mrs-key", nil)
			if c := rl.body["concurrency"].(map[string]any); c["active"] != 1.0 {
				t.Fatalf("rate limit view through b: %s", rl.raw)
			}
		})
	}
}

// TestReplicasRedisReusedIDOtherQueue (FINDING): a job id the producer gives, reused in another
// queue once the first job is gone, must be heartbeatable and ackable through a replica that once
// claimed the first one; that replica's cache of claimed jobs' queues still names the old queue, so
// it answers the live job lost and its ack 409.
// TestReplicasMoreSettings: a tenant's max_concurrency set through one replica holds on the
// other's fetches; maintenance enabled through one and disabled through the other resumes the
// queues; a schema deleted through one stops applying on the other.
func TestReplicasMoreSettings(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			a, b := ss[0], ss[1]
			for range 3 {
				enqueueJob(t, a, `{"type":"m.tc","args":[],"meta":{"tenant_id":"tc"},"options":{"queue":"mtc"}}`)
			}
			mustCall(t, a, 200, "PUT", "/ojs/v1/admin/tenants/tc/limits", `{"max_concurrency":1}`)
			if got := replicaFetch(t, b, "mtc", "w", 3); len(got) != 1 {
				t.Fatalf("tenant max_concurrency 1 set through a: b handed out %d", len(got))
			}

			enqueueJob(t, a, `{"type":"m.mm","args":[],"options":{"queue":"mmm"}}`)
			mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true}`)
			mustCall(t, b, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
			if got := replicaFetch(t, b, "mmm", "w", 1); len(got) != 1 {
				q := mustCall(t, b, 200, "GET", "/ojs/v1/admin/queues/mmm", nil)
				t.Fatalf("maintenance on through a, off through b: b fetched %d: %s", len(got), q.raw)
			}
			enqueueJob(t, a, `{"type":"m.mm","args":[],"options":{"queue":"mmm"}}`)
			replicaEventually(t, "a fetches after maintenance ended through b", func() bool {
				return len(replicaFetch(t, a, "mmm", "w", 1)) == 1
			})

			mustCall(t, a, 201, "POST", "/ojs/v1/schemas",
				`{"uri":"urn:m:d:1","type":"m.sd","version":1,"schema":{"type":"array","items":{"type":"integer"}}}`)
			replicaEventually(t, "b applies the schema", func() bool {
				return call(t, b, "POST", "/ojs/v1/jobs", `{"type":"m.sd","args":["x"],"options":{"queue":"msd"}}`).status == 422
			})
			mustCall(t, a, 200, "DELETE", "/ojs/v1/schemas/urn:m:d:1", nil)
			replicaEventually(t, "b stops applying the deleted schema", func() bool {
				return call(t, b, "POST", "/ojs/v1/jobs", `{"type":"m.sd","args":["x"],"options":{"queue":"msd"}}`).status == 201
			})
		})
	}
}

// TestReplicasMaintenanceEnableRace (FINDING): maintenance enabled through replica b while the same
// enable through replica a lands between b's read of the mode and its write (deterministic: b is
// held after its read). Disabling must resume every queue the mode paused; b's write drops a's
// list of paused queues, so they stay paused for good.
// TestReplicasPoolPutRace (FINDING): a pool created through replica a between replica b's read and write
// of the pools setting (b held after its read: deterministic) is lost, though a answered it 200.
