package server

import (
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// fenceServer is a server over a store of the given kind whose leader rescues expired leases quickly.
func fenceServer(t *testing.T, kind string) *Server {
	t.Helper()
	c, err := pronto.NewClient(openStore(t, kind), &pronto.Config{RescueInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: c})
	return s
}

// refetch fetches from queue as worker until it gets job id again (its earlier lease must run out and
// the rescuer take it back first), and returns it as fetched.
func refetch(t *testing.T, s *Server, queue, worker, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"`+worker+`"}`)
		if r.status != 200 {
			t.Fatalf("fetch: %d %s", r.status, r.raw)
		}
		if jobs := r.body["jobs"].([]any); len(jobs) == 1 {
			j := jobs[0].(map[string]any)
			if j["id"] != id {
				t.Fatalf("fetched job %v, want %s", j["id"], id)
			}
			return j
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("job %s was never handed out again", id)
	return nil
}

// fetchAs fetches one job of queue as worker with a short visibility timeout.
func fetchAs(t *testing.T, s *Server, queue, worker string) map[string]any {
	t.Helper()
	r := call(t, s, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"`+worker+`","visibility_timeout_ms":300}`)
	if r.status != 200 || len(r.body["jobs"].([]any)) != 1 {
		t.Fatalf("fetch: %d %s", r.status, r.raw)
	}
	j := r.body["jobs"].([]any)[0].(map[string]any)
	if tok, _ := j["claim_token"].(string); tok == "" {
		t.Fatalf("the fetched job carries no claim_token: %s", r.raw)
	}
	return j
}

// TestStaleHTTPOutcomesAreRefused: worker w1's lease runs out and w2 fetches the job again. Every
// outcome w1 can send (with its worker id, with its claim token, with its attempt, or naming nothing)
// is refused with 409 and leaves the job to w2, whose outcome decides it.
func TestStaleHTTPOutcomesAreRefused(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := fenceServer(t, kind)
			id := enqueueIn(t, s, "fence", "")
			w1 := fetchAs(t, s, "fence", "w1")
			w2 := refetch(t, s, "fence", "w2", id)
			if w2["attempt"] != 2.0 || w2["claim_token"] == w1["claim_token"] {
				t.Fatalf("refetched: attempt %v, token %v (first %v)", w2["attempt"], w2["claim_token"], w1["claim_token"])
			}
			for _, body := range []string{
				`{"job_id":"` + id + `","worker_id":"w1","result":"w1"}`,
				`{"job_id":"` + id + `","result":"w1"}`,
				`{"job_id":"` + id + `","claim_token":"` + w1["claim_token"].(string) + `","result":"w1"}`,
				`{"job_id":"` + id + `","attempt":1,"result":"w1"}`,
			} {
				r := call(t, s, "POST", "/ojs/v1/workers/ack", body)
				checkErrorBody(t, r, 409, CodeConflict)
				r = call(t, s, "POST", "/ojs/v1/workers/nack", body[:len(body)-1]+`,"error":{"message":"w1"}}`)
				checkErrorBody(t, r, 409, CodeConflict)
			}
			r := call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w2","claim_token":"`+
				w2["claim_token"].(string)+`","result":"w2"}`)
			if r.status != 200 || r.body["state"] != "completed" || r.body["attempt"] != 2.0 {
				t.Fatalf("w2's ack: %d %s", r.status, r.raw)
			}
			j := obj(t, call(t, s, "GET", "/ojs/v1/jobs/"+id, nil), "job")
			if j["state"] != "completed" || j["result"] != "w2" || j["attempt"] != 2.0 {
				t.Fatalf("job after the outcomes: %v", j)
			}
		})
	}
}

// TestSameWorkerIDFencedByClaimToken: a worker restarted under the same id fetches its own job
// again; the earlier run, which has the same worker id, is told apart by its claim token.
func TestSameWorkerIDFencedByClaimToken(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := fenceServer(t, kind)
			id := enqueueIn(t, s, "fence", "")
			first := fetchAs(t, s, "fence", "w")
			second := refetch(t, s, "fence", "w", id)
			r := call(t, s, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w","claim_token":"`+
				first["claim_token"].(string)+`","error":{"message":"late"}}`)
			checkErrorBody(t, r, 409, CodeConflict)
			r = call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`","worker_id":"w","claim_token":"`+
				second["claim_token"].(string)+`","result":"second"}`)
			if r.status != 200 || r.body["state"] != "completed" {
				t.Fatalf("the current run's ack: %d %s", r.status, r.raw)
			}
			j := obj(t, call(t, s, "GET", "/ojs/v1/jobs/"+id, nil), "job")
			if j["result"] != "second" || len(j["errors"].([]any)) != 1 {
				t.Fatalf("job: %v", j)
			}
		})
	}
}

// TestAnonymousAckOfAnUnbrokenClaim: an outcome that names no claim still decides a job none of whose
// claims was lost, as OJS clients that send only the job id expect.
func TestAnonymousAckOfAnUnbrokenClaim(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := enqueueIn(t, s, "fence", "")
	fetchAs(t, s, "fence", "w")
	r := call(t, s, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+id+`"}`)
	if r.status != 200 || r.body["state"] != "completed" {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
}
