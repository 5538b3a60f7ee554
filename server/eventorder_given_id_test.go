package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestDuplicateIDInsertDoesNotReenqueue: a second POST /ojs/v1/jobs giving the id of an
// existing job (an SDK retrying a request whose answer it lost) is refused as a duplicate, and a
// worker fetching the existing job meanwhile records no second job.enqueued: an id the request gave
// is not marked as being inserted (enqueueOrder).
func TestDuplicateIDInsertDoesNotReenqueue(t *testing.T) {
	var s *Server
	var during atomic.Bool
	client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
		func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			if during.Load() {
				fetchAndAck(t, s, "dup-order", "w1") // the existing job, fetched while the duplicate is in flight
			}
			return next(ctx, ps)
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = newTestServer(t, Config{Client: client})
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"dup-order"}}`)
	during.Store(true)
	r := call(t, s, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"id":%q,"type":"a.b","args":[],"options":{"queue":"dup-order"}}`, id))
	during.Store(false)
	if r.status != 409 {
		t.Fatalf("duplicate id: status %d, want 409: %s", r.status, r.raw)
	}
	types := loggedTypes(waitLogged(t, s, id, "job.completed"))
	want := []string{"job.enqueued", "job.started", "job.completed"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("events of the existing job %v, want %v: the refused duplicate's insert made the fetch record job.enqueued again", types, want)
	}
}
