package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/memory"
)

// "Replay every dead-letter job" counts with GET /api/count?deadletter=1, which returns at most max
// (10,000) ids and says capped when more match. The dead-letter filter keeps only some jobs of each
// page it reads, so the last page read can carry the count past the cap: the count must stop at the
// cap and say capped, or the confirmation promises replays that the bulk action cannot perform.
func TestDeadLetterCountStopsAtCap(t *testing.T) {
	const dead = 10001
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[noteArgs]) error {
		return errors.New("boom")
	}))
	st := &flakyStore{Store: memory.New(memory.WithMaxFinished(0))}
	base, c := st.serve(t, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{"dlq": {MaxWorkers: 50}},
		Workers: workers, PollInterval: 20 * time.Millisecond, DisableMaintenance: true,
		// The dead letter queue keeps more than the default 10,000 (ojs-dead-letter.md 5, max_count).
		DiscardedMaxCount: 100000,
	})
	bg := context.Background()
	batch := make([]pronto.InsertManyParams, 0, 1000)
	for i := 0; i < dead; i++ {
		batch = append(batch, pronto.InsertManyParams{Args: noteArgs{Text: "d"}, Opts: &pronto.InsertOpts{Queue: "dlq", MaxAttempts: 1}})
		if len(batch) == cap(batch) || i == dead-1 {
			if _, err := c.InsertMany(bg, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// The newest discarded job is not in the dead letter queue: its retry policy said on_exhaustion
	// "discard" (as the OJS API records it).
	if _, err := c.Insert(bg, noteArgs{Text: "policy"}, &pronto.InsertOpts{Queue: "dlq", MaxAttempts: 1,
		Meta: map[string]any{"_pronto": map[string]any{"oe": "discard"}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	for deadline := time.Now().Add(90 * time.Second); ; {
		qs, err := c.QueueList(bg)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for _, q := range qs {
			if q.Name == "dlq" {
				n = q.Counts[pronto.StateDiscarded]
			}
		}
		if n == dead+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs discarded after 90 s: %+v", n, dead+1, qs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b := newBrowser(t, base)
	b.open()
	code, body := b.do("GET", "/api/count?deadletter=1", "", nil)
	var cnt struct {
		Count  int      `json:"count"`
		Capped bool     `json:"capped"`
		Max    int      `json:"max"`
		IDs    []string `json:"ids"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &cnt) != nil {
		t.Fatalf("GET /api/count?deadletter=1: %d %.300s", code, body)
	}
	if cnt.Count != cnt.Max || len(cnt.IDs) != cnt.Max || !cnt.Capped {
		t.Fatalf("GET /api/count?deadletter=1 with %d dead-letter jobs: count %d, %d ids, capped %v; want the first %d, capped",
			dead, cnt.Count, len(cnt.IDs), cnt.Capped, cnt.Max)
	}
	// Exactly max matching jobs is all of them, not "the first max (of more)".
	if _, err := c.JobDelete(bg, cnt.IDs[0]); err != nil {
		t.Fatal(err)
	}
	if code, body = b.do("GET", "/api/count?deadletter=1", "", nil); code != 200 || json.Unmarshal([]byte(body), &cnt) != nil {
		t.Fatalf("GET /api/count?deadletter=1: %d %.300s", code, body)
	}
	if cnt.Count != cnt.Max || cnt.Capped {
		t.Fatalf("GET /api/count?deadletter=1 with %d dead-letter jobs: count %d, capped %v; want all %d, not capped", cnt.Max, cnt.Count, cnt.Capped, cnt.Max)
	}
	// The replay the confirmation promised acts on every counted job (the client takes 1,000 a call).
	req, _ := json.Marshal(map[string]any{"action": "retry", "ids": cnt.IDs})
	code, body = b.post("/api/bulk", string(req))
	var done struct {
		Done   int               `json:"done"`
		Failed []json.RawMessage `json:"failed"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &done) != nil || done.Done != len(cnt.IDs) {
		t.Fatalf("POST /api/bulk retrying the %d counted dead-letter jobs: %d %.300s; want all done", len(cnt.IDs), code, body)
	}
}

// POST /api/bulk never drops ids silently: a list over the cap is refused whole, naming the limit.
func TestBulkRefusesMoreThanMax(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{})
	b := newBrowser(t, srv.URL)
	b.open()
	ids := make([]string, 10001)
	for i := range ids {
		ids[i] = fmt.Sprintf("019ad000-0000-7000-8000-%012d", i)
	}
	req, _ := json.Marshal(map[string]any{"action": "retry", "ids": ids})
	code, resp := b.post("/api/bulk", string(req))
	if code != 400 || !strings.Contains(resp, "10001 jobs selected") || !strings.Contains(resp, "at most 10000") {
		t.Fatalf("POST /api/bulk with 10,001 ids: %d %.300s; want 400 naming the limit of 10000", code, resp)
	}
}
