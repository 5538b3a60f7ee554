package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReplicasShutdownMidTraffic: one of three replicas shuts down as `pronto serve` does
// (Drain, HTTP Shutdown, client Stop) while workers fetch and ack through all of them; every job
// completes, none is left held by the replica that went, and its leadership moves on (a lease that
// runs out afterwards is rescued, a retry is promoted).
//
// The workers treat a transport error (connection refused, reset, EOF) as "nothing happened": they
// fetch again, or send the ack through the next replica. That holds for http.Server.Shutdown alone:
// it marks the server shutting down before it closes the connections it finds idle, and a
// connection that reads a request marks itself active before it checks that mark, so a request
// read during Shutdown is either served to the end (Shutdown waits for it) or dropped before its
// handler runs. It does not hold for SetKeepAlivesEnabled(false), which closes the connections it
// finds idle without that mark: a request read at that moment still runs its handler (a fetch
// claims its jobs, an ack completes its job) and its answer goes to a closed socket. This test once
// called it before Shutdown, which `pronto serve` does not, and so lost a fetch's jobs (active for
// their 30 minute lease) or an ack's answer (its job completed, then a 409 through the next
// replica) in about one run of it in ten.
func TestReplicasShutdownMidTraffic(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ss := replicaServers(t, kind, 3, Config{})
			hss := make([]*httptest.Server, 3)
			for i, s := range ss {
				hss[i] = httptest.NewServer(s)
				t.Cleanup(hss[i].Close)
			}
			const total = 60
			for i := range total {
				enqueueJob(t, ss[i%3], `{"type":"m.sd","args":[],"options":{"queue":"msd"}}`)
			}
			var down sync.Map // index -> true once shut down
			// post answers the decoded body and status, or the transport error.
			post := func(i int, path, body string) (map[string]any, int, error) {
				resp, err := http.Post(hss[i].URL+path, "application/json", strings.NewReader(body))
				if err != nil {
					return nil, 0, err
				}
				defer resp.Body.Close()
				var m map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
					// An answer cut short would lose what it carried as surely as one never sent.
					t.Errorf("%s through %d: %d with an unreadable body: %v", path, i, resp.StatusCode, err)
					return nil, 0, err
				}
				return m, resp.StatusCode, nil
			}
			var acked sync.Map
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var stopOnce sync.Once
			halt := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
			defer halt() // also when the test fails: no worker outlives it
			stopped := func() bool {
				select {
				case <-stop:
					return true
				default:
					return false
				}
			}
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := w
					for !stopped() {
						n++
						fi := n % 3
						if _, ok := down.Load(fi); ok {
							continue
						}
						m, code, err := post(fi, "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":["msd"],"worker_id":"w%d","count":2}`, w))
						if err != nil || code != 200 {
							continue
						}
						for _, jj := range m["jobs"].([]any) {
							j := jj.(map[string]any)
							for k := 1; !stopped(); k++ {
								ai := (fi + k) % 3
								if _, ok := down.Load(ai); ok {
									continue
								}
								r, code, err := post(ai, "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w%d","claim_token":%q}`, j["id"], w, j["claim_token"]))
								if err == nil && code == 200 {
									acked.Store(j["id"], true)
									break
								}
								if err == nil && code != 200 {
									t.Errorf("ack through %d: %d %v", ai, code, r)
									break
								}
							}
						}
					}
				}()
			}
			count := func() int {
				n := 0
				acked.Range(func(any, any) bool { n++; return true })
				return n
			}
			replicaEventually(t, "some traffic", func() bool { return count() >= 10 })
			// Replica 0 shuts down as serve does (internal/cli/serve.go).
			ss[0].Drain()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := hss[0].Config.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			down.Store(0, true)
			if err := ss[0].client.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
			cancel()
			if !replicaPoll(15*time.Second, func() bool { return count() == total }) {
				r := mustCall(t, ss[1], 200, "GET", "/ojs/v1/admin/jobs?queue=msd&per_page=100", nil)
				var left []string
				for _, it := range r.body["items"].([]any) {
					j := it.(map[string]any)
					if _, ok := acked.Load(j["id"]); !ok {
						left = append(left, fmt.Sprintf("%v %v worker=%v attempt=%v", j["id"], j["state"], j["worker_id"], j["attempt"]))
					}
				}
				t.Fatalf("%d of %d jobs acked; the others: %v", count(), total, left)
			}
			halt()
			r := mustCall(t, ss[1], 200, "GET", "/ojs/v1/admin/jobs?queue=msd&state=completed&per_page=100", nil)
			if n := len(r.body["items"].([]any)); n != total {
				t.Fatalf("%d of %d completed", n, total)
			}

			// Leadership moved: a lease that runs out is rescued, a retry promoted.
			id := enqueueJob(t, ss[1], `{"type":"m.sd2","args":[],"options":{"queue":"msd2","retry":{"max_attempts":5,"initial_interval":"PT1S","jitter":false}}}`)
			j := replicaFetch(t, ss[2], "msd2", "wx", 1)
			if len(j) != 1 {
				t.Fatal("fetch msd2")
			}
			mustCall(t, ss[1], 200, "POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":"wx","claim_token":%q,"error":{"message":"x"}}`, id, j[0]["claim_token"]))
			var j2 []map[string]any
			replicaEventually(t, "retry refetched", func() bool {
				j2 = replicaFetch(t, ss[2], "msd2", "wx", 1)
				return len(j2) == 1
			})
			_ = mustCall(t, ss[1], 200, "POST", "/ojs/v1/workers/heartbeat", fmt.Sprintf(`{"worker_id":"wx","active_job_ids":[%q],"visibility_timeout_ms":300}`, id))
			replicaEventually(t, "lease rescued and refetched", func() bool {
				return len(replicaFetch(t, ss[1], "msd2", "wy", 1)) == 1
			})
		})
	}
}

// replicaPoll polls cond until it holds (true) or d passes (false).
func replicaPoll(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
