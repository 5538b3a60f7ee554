package server

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestBackpressureIgnoresUnstoredInserts: enqueues that store nothing (a unique duplicate answered
// 200 deduplicated, a unique conflict answered 409) leave room in a bounded queue: bound 3 holding
// one job takes a new one (it was refused 429 queue_full, depth 3). The bound counts the jobs that
// have not finished (ojs-backpressure.md §6.1); on every store. The root package's
// TestQueueDepthCountsOnlyStoredJobs checks the same with the depth never reread meanwhile.
func TestBackpressureIgnoresUnstoredInserts(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			mustCall(t, s, http.StatusOK, "PUT", "/ojs/v1/admin/queues/bq/config", `{"backpressure":{"max_depth":3}}`)
			dup := `{"type":"a.b","args":[1],"options":{"queue":"bq","unique":{"keys":["type","args"],"on_conflict":"%s"}}}`
			mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs", fmt.Sprintf(dup, "ignore"))
			r := call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(dup, "ignore"))
			if r.status != http.StatusOK || r.body["deduplicated"] != true {
				t.Fatalf("duplicate (ignore): %d %s", r.status, r.raw)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(dup, "reject")), http.StatusConflict, "")

			// One job in the queue, bound 3: two new jobs fit, a third does not.
			for i := range 2 {
				r = call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"a.b","args":[%d],"options":{"queue":"bq"}}`, 10+i))
				if r.status != http.StatusCreated {
					q := call(t, s, "GET", "/ojs/v1/admin/queues/bq", nil)
					t.Fatalf("new job %d into bq (bound 3): %d %s\nqueue: %s", i+1, r.status, r.raw, q.raw)
				}
			}
			r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[20],"options":{"queue":"bq"}}`)
			checkErrorBody(t, r, http.StatusTooManyRequests, CodeQueueFull)
			if d := r.header.Get("X-OJS-Queue-Depth"); d != "3" {
				t.Fatalf("X-OJS-Queue-Depth %q of a full queue holding 3 jobs, want 3", d)
			}
		})
	}
}
