package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Helpers for the dead-letter, bulk retry and replay tests: a started client's server over each
// store, and jobs moved through fetch and nack over HTTP.

// startedServer returns a server over a fresh store of kind, its client started.
func startedServer(t *testing.T, kind string) *Server {
	t.Helper()
	st := openStore(t, kind)
	client, err := pronto.NewClient(st, &pronto.Config{RescueInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
		_ = s.Close()
	})
	return s
}

// onEveryFlowStore runs f on a started server over each of storeKinds.
func onEveryFlowStore(t *testing.T, f func(t *testing.T, s *Server)) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { f(t, startedServer(t, kind)) })
	}
}

// enqueueBody posts one job envelope.
func enqueueBody(t *testing.T, h http.Handler, body string) *response {
	t.Helper()
	return call(t, h, "POST", "/ojs/v1/jobs", body)
}

// fetchFrom fetches one job of queue as worker "w", waiting for one to be there.
func fetchFrom(t *testing.T, h http.Handler, queue string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call(t, h, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"w"}`)
		if r.status != 200 {
			t.Fatalf("fetch: %d %s", r.status, r.raw)
		}
		if jobs, _ := r.body["jobs"].([]any); len(jobs) > 0 {
			return jobs[0].(map[string]any)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job in queue %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nackFetched fails a fetched job with the error object errBody.
func nackFetched(t *testing.T, h http.Handler, j map[string]any, errBody string) *response {
	t.Helper()
	return call(t, h, "POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"error":%s}`, j["id"], j["claim_token"], errBody))
}

// discardOne enqueues a job of type typ into queue with one attempt, fetches it and fails it (error
// type Boom), so that it lands in the dead-letter list; it returns the job id.
func discardOne(t *testing.T, h http.Handler, typ, queue string) string {
	t.Helper()
	r := enqueueBody(t, h, `{"type":"`+typ+`","args":[],"options":{"queue":"`+queue+`","retry":{"max_attempts":1}}}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	j := fetchFrom(t, h, queue)
	if n := nackFetched(t, h, j, `{"code":"x","message":"boom","type":"Boom"}`); n.status != 200 || n.body["state"] != "discarded" {
		t.Fatalf("nack: %d %s", n.status, n.raw)
	}
	return j["id"].(string)
}
