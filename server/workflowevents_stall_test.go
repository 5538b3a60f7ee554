package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// slowWorkflowStore is a memory store whose GetWorkflow, once armed, waits until released: a store
// whose workflow reads are slow (a loaded database, a network hiccup).
type slowWorkflowStore struct {
	*memory.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (z *slowWorkflowStore) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	if z.armed.Load() {
		z.once.Do(func() { close(z.entered) })
		<-z.release // deliberately not ctx: the read is simply slow
	}
	return z.Store.GetWorkflow(ctx, id)
}

// TestWorkflowReadDoesNotStallJobEvents: the workflow events read the workflow, which used to happen
// on the goroutine that consumes every client event. While one such read was slow, the client's
// subscription buffer (1000) filled with the outcomes of unrelated jobs, and the client dropped them:
// job.completed (and the outcome counts recordOutcome keeps) went missing for jobs outside any
// workflow. The reads now have a goroutine of their own.
func TestWorkflowReadDoesNotStallJobEvents(t *testing.T) {
	st := &slowWorkflowStore{Store: memory.New(), entered: make(chan struct{}), release: make(chan struct{})}
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	var releaseOnce sync.Once
	rel := func() { releaseOnce.Do(func() { close(st.release) }) }
	t.Cleanup(rel) // runs before the server's cleanup (LIFO), so Close does not wait forever

	_, ids := createWF(t, s, `{"type":"chain","name":"zrev","steps":[{"type":"zrev.step","args":[],"options":{"queue":"zrevwf"}}]}`)
	if j := fetchOne(t, s, "zrevwf"); j == nil || j["id"] != ids[0] {
		t.Fatalf("fetched %v, want %s", j, ids[0])
	}
	st.armed.Store(true)
	ack(t, s, ids[0], "null")
	<-st.entered // a workflow read is now under way, and stays so until rel

	const n = 1100
	var b strings.Builder
	b.WriteString(`{"jobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"type":"zrev.plain","args":[],"options":{"queue":"zrevplain"}}`)
	}
	b.WriteString(`]}`)
	mustCall(t, s, 201, "POST", "/ojs/v1/jobs/batch", b.String())
	acked := 0
	for acked < n {
		r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["zrevplain"],"worker_id":"w","count":100}`)
		jobs := r.body["jobs"].([]any)
		if len(jobs) == 0 {
			t.Fatalf("fetched nothing after %d acks", acked)
		}
		for _, j := range jobs {
			ack(t, s, j.(map[string]any)["id"].(string), "null")
			acked++
		}
	}
	dropped := client.DroppedEvents()
	rel()
	if dropped > 0 {
		t.Fatalf("%d client events of jobs outside any workflow were dropped while the event consumer waited on one workflow read", dropped)
	}
}
