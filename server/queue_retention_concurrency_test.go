package server

import (
	"fmt"
	"sync"
	"testing"
)

// TestQueueConfigRetentionPutsTogether: concurrent PUTs of a queue's config through one server, one
// setting the completed retention and one the cancelled, both answer 200 and both stay, for each of
// many queues at once.
func TestQueueConfigRetentionPutsTogether(t *testing.T) {
	s, _ := storeServer(t, "memory", Config{})
	const queues = 100
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan string, 2*queues)
	for i := range queues {
		q := fmt.Sprintf("ret%d", i)
		for _, body := range []string{`{"retention":{"completed":"PT1H"}}`, `{"retention":{"cancelled":"PT2H"}}`} {
			wg.Go(func() {
				<-start
				if r := call(t, s, "PUT", "/ojs/v1/admin/queues/"+q+"/config", body); r.status != 200 {
					errs <- fmt.Sprintf("PUT %s %s: %d %s", q, body, r.status, r.raw)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	for i := range queues {
		q := fmt.Sprintf("ret%d", i)
		r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/"+q+"/config", nil)
		ret, _ := r.body["retention"].(map[string]any)
		if ret["completed"] != "PT1H" || ret["cancelled"] != "PT2H" {
			t.Fatalf("queue %s lost one of two concurrent retention PUTs (both answered 200): %s", q, r.raw)
		}
	}
}
