package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestWorkerStoppedOJSWorker: an OJS worker's heartbeat reporting "terminate" with no job left (the
// last one before it exits, ojs-worker-protocol.md 2.3) records worker.stopped once, with its queues;
// a terminating worker still holding jobs has not stopped. It was never recorded.
func TestWorkerStoppedOJSWorker(t *testing.T) {
	for _, kind := range []string{"memory", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			s.events.workers.every = 0
			const wk = "wk-stopped-1"
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["stq"],"worker_id":"`+wk+`"}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk+`","state":"terminate","active_jobs":2}`)
			if got := loggedTypes(workerEvs(t, s, wk)); slices.Contains(got, "worker.stopped") {
				t.Fatalf("events %v: worker.stopped while the worker still holds jobs", got)
			}
			for range 2 {
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk+`","state":"terminate","active_jobs":0}`)
			}
			evs := workerEvs(t, s, wk)
			want := []string{"worker.started", "worker.heartbeat", "worker.heartbeat", "worker.stopped", "worker.heartbeat"}
			if got := loggedTypes(evs); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			d := evs[3]["data"].(map[string]any)
			if d["worker_id"] != wk || d["reason"] != "shutdown" || !slices.Equal(toStrings(d["queues"]), []string{"stq"}) {
				t.Fatalf("worker.stopped %v", d)
			}

			// The same id started again (a host-named worker restarted): a new run, started and
			// stopped again.
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["stq"],"worker_id":"`+wk+`"}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"`+wk+`","state":"terminate","active_jobs":0}`)
			want = append(want, "worker.started", "worker.heartbeat", "worker.stopped")
			if got := loggedTypes(workerEvs(t, s, wk)); !slices.Equal(got, want) {
				t.Fatalf("after a restart under the same id: events %v, want %v", got, want)
			}
		})
	}
}

type stopRelayArgs struct{}

func (stopRelayArgs) Kind() string { return "stop.relay" }

// TestWorkerStoppedClientRelayed: the Stop of the server's client records worker.stopped of its Go
// workers (worker_id the client's id, its queues, the jobs it completed, its uptime).
func TestWorkerStoppedClientRelayed(t *testing.T) {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(context.Context, *pronto.Job[stopRelayArgs]) error { return nil }))
	client, err := pronto.NewClient(openStore(t, "memory"), &pronto.Config{ID: "go-workers", Workers: ws,
		Queues: map[string]pronto.QueueConfig{"gq": {MaxWorkers: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client}) // starts the client
	if err := client.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := waitWorkerEvent(t, s, "go-workers", "worker.stopped")
	d := evs[len(evs)-1]["data"].(map[string]any)
	if d["reason"] != "shutdown" || !slices.Equal(toStrings(d["queues"]), []string{"gq"}) || num(t, d, "jobs_completed") != 0 {
		t.Fatalf("worker.stopped %v", d)
	}
	if _, ok := d["uptime_ms"]; !ok {
		t.Fatalf("worker.stopped without uptime_ms: %v", d)
	}
}

// waitWorkerEvent waits until the window holds an event typ of worker id and returns its events.
func waitWorkerEvent(t *testing.T, s *Server, id, typ string) []map[string]any {
	t.Helper()
	for i := 0; ; i++ {
		evs := workerEvs(t, s, id)
		if got := loggedTypes(evs); slices.Contains(got, typ) {
			return evs
		}
		if i == 500 {
			t.Fatalf("no %s of worker %s in the window", typ, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
