package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
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

// TestGivenIDEnqueuedBeforeStartedWhenFetchedDuringInsert: a job whose id the request gave, fetched
// and completed by a worker before the insert call that made it returned, has its job.enqueued
// first, once (ojs-events.md 5.2), through each insert endpoint. Such ids were not marked as being
// inserted at all, so the job's events came as job.started, job.completed, job.enqueued.
func TestGivenIDEnqueuedBeforeStartedWhenFetchedDuringInsert(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite"} {
		for _, path := range []struct{ name, endpoint, body string }{
			{"enqueue", "/ojs/v1/jobs", `{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-during"}}`},
			{"batch", "/ojs/v1/jobs/batch", `{"jobs":[{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-during"}}]}`},
			{"bulk", "/ojs/v1/jobs/bulk", `{"jobs":[{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-during"}}]}`},
			{"bulk atomic", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-during"}}]}`},
			{"workflow", "/ojs/v1/workflows", `{"type":"chain","steps":[{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-during"}}]}`},
		} {
			t.Run(kind+"/"+path.name, func(t *testing.T) {
				var s *Server
				var fetched string
				client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
					func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
						rows, err := next(ctx, ps)
						if err == nil {
							fetched = fetchAndAck(t, s, "given-during", "w1")
						}
						return rows, err
					},
				}})
				if err != nil {
					t.Fatal(err)
				}
				s, _ = newTestServer(t, Config{Client: client})
				id := uuidv7.New()
				if r := call(t, s, "POST", path.endpoint, fmt.Sprintf(path.body, id)); r.status/100 != 2 {
					t.Fatalf("%s: %d %s", path.endpoint, r.status, r.raw)
				}
				if fetched != id {
					t.Fatalf("the worker fetched %q during the insert, want the job %s", fetched, id)
				}
				types := loggedTypes(waitLogged(t, s, id, "job.completed"))
				if !lifecycleOrderOK(types) {
					t.Fatalf("events of the job %v, want one job.enqueued, then job.started, then job.completed (ojs-events.md 5.2)", types)
				}
			})
		}
	}
}

// TestGivenIDRacingInsertsKeepOrder: two requests insert one given id at once; the first stores the
// job, and a worker fetches and completes it while both are in flight; the second is refused (409)
// and returns first. The job's events are still job.enqueued, job.started, job.completed: the
// refused insert ending must not release the job's events ahead of the first insert's job.enqueued.
func TestGivenIDRacingInsertsKeepOrder(t *testing.T) {
	var s *Server
	id := uuidv7.New()
	body := fmt.Sprintf(`{"id":%q,"type":"a.b","args":[],"options":{"queue":"given-race"}}`, id)
	secondIn := make(chan struct{})  // the second insert reached the middleware
	fetchDone := make(chan struct{}) // the worker fetched and acked the job
	secondDone := make(chan int, 1)  // the second request's status
	var calls atomic.Int32
	client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
		func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			if calls.Add(1) == 2 {
				close(secondIn)
				<-fetchDone
				return next(ctx, ps)
			}
			rows, err := next(ctx, ps)
			if err != nil {
				return rows, err
			}
			go func() { secondDone <- call(t, s, "POST", "/ojs/v1/jobs", body).status }()
			<-secondIn
			if got := fetchAndAck(t, s, "given-race", "w1"); got != id {
				t.Errorf("the worker fetched %q, want %s", got, id)
			}
			close(fetchDone)
			if st := <-secondDone; st != 409 {
				t.Errorf("the second insert of the id: status %d, want 409", st)
			}
			return rows, err
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = newTestServer(t, Config{Client: client})
	if r := call(t, s, "POST", "/ojs/v1/jobs", body); r.status != 201 {
		t.Fatalf("first insert: %d %s", r.status, r.raw)
	}
	types := loggedTypes(waitLogged(t, s, id, "job.completed"))
	if !lifecycleOrderOK(types) {
		t.Fatalf("events of the job %v, want one job.enqueued, then job.started, then job.completed (ojs-events.md 5.2)", types)
	}
}
