package server

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestBulkPanicLeavesNoPendingIDs: enqueueOrder keeps only the ids of inserts in flight, also when an
// insert panics (an insert middleware, a store bug; ServeHTTP recovers and answers 500): the bulk
// endpoint's deferred end once read ids from the inserts' return value, which a panic never set.
func TestBulkPanicLeavesNoPendingIDs(t *testing.T) {
	var panics atomic.Bool
	client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
		func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			if panics.Load() {
				panic("insert middleware bug")
			}
			return next(ctx, ps)
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	panics.Store(true)
	for _, c := range []struct{ name, path, body string }{
		{"enqueue", "/ojs/v1/jobs", `{"type":"a.b","args":[]}`},
		{"batch", "/ojs/v1/jobs/batch", `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`},
		{"bulk atomic", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`},
		{"bulk partial", "/ojs/v1/jobs/bulk", `{"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":[]}]}`},
	} {
		r := call(t, s, "POST", c.path, c.body)
		if r.status != 500 {
			t.Fatalf("%s: status %d, want 500 from the panic: %s", c.name, r.status, r.raw)
		}
		s.order.mu.Lock()
		n := len(s.order.pending)
		clear(s.order.pending) // each case counted on its own
		s.order.mu.Unlock()
		if n != 0 {
			t.Errorf("%s: %d ids left in enqueueOrder.pending after the insert ended (panicked); only inserts in flight may be kept", c.name, n)
		}
	}
}
