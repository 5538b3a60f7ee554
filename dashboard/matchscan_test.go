package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// rowCountingStore is a memory store that counts the job rows its lists return.
type rowCountingStore struct {
	*memory.Store
	rows atomic.Int64
}

func (s *rowCountingStore) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	jobs, next, err := s.Store.ListJobs(ctx, p)
	s.rows.Add(int64(len(jobs)))
	return jobs, next, err
}

// TestMatchScanBounded: GET /api/count and POST /api/bulk by filter read at most 11,000 jobs, as the
// OJS admin API bounds its filtered reads. The dead-letter filter keeps only some of the discarded
// jobs it reads, so before, a store holding many discarded jobs outside the dead letter queue (a
// retry policy's on_exhaustion "discard") was read whole for one count: here 11,105 rows for 5
// dead-letter jobs. Now the read stops at 11,000 jobs and the answer says partial (at least count).
func TestMatchScanBounded(t *testing.T) {
	const dead, kept = 5, 11100
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[noteArgs]) error {
		return errors.New("boom")
	}))
	st := &rowCountingStore{Store: memory.New(memory.WithMaxFinished(0))}
	c, err := pronto.NewClient(st, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{"dlq": {MaxWorkers: 50}},
		Workers: workers, PollInterval: 20 * time.Millisecond, DisableMaintenance: true, DiscardedMaxCount: 100000,
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	insert := func(n int, meta map[string]any) {
		t.Helper()
		for done := 0; done < n; {
			batch := make([]pronto.InsertManyParams, min(1000, n-done))
			for i := range batch {
				batch[i] = pronto.InsertManyParams{Args: noteArgs{Text: "d"}, Opts: &pronto.InsertOpts{Queue: "dlq", MaxAttempts: 1, Meta: meta}}
			}
			if _, err := c.InsertMany(bg, batch); err != nil {
				t.Fatal(err)
			}
			done += len(batch)
		}
	}
	insert(dead, nil)
	insert(kept, map[string]any{"_pronto": map[string]any{"oe": "discard"}})
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
		var n int64
		for _, q := range qs {
			n += q.Counts[pronto.StateDiscarded]
		}
		if n == dead+kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs discarded after 90 s", n, dead+kept)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	b := newBrowser(t, srv.URL)
	b.open()
	const scanMax = 11000

	st.rows.Store(0)
	code, body := b.do("GET", "/api/count?deadletter=1", "", nil)
	var cnt struct {
		Count   int  `json:"count"`
		Capped  bool `json:"capped"`
		Partial bool `json:"partial"`
		Read    int  `json:"read"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &cnt) != nil {
		t.Fatalf("GET /api/count?deadletter=1: %d %.300s", code, body)
	}
	if rows := st.rows.Load(); rows > scanMax {
		t.Fatalf("GET /api/count?deadletter=1 read %d job rows (count %d), over the bound of %d", rows, cnt.Count, scanMax)
	}
	if !cnt.Partial || cnt.Capped || cnt.Read != scanMax {
		t.Fatalf("a count cut short by the bound: %.300s; want partial, read %d", body, scanMax)
	}

	st.rows.Store(0)
	code, body = b.post("/api/bulk", `{"action":"retry","filter":"deadletter=1"}`)
	if rows := st.rows.Load(); rows > scanMax {
		t.Fatalf("POST /api/bulk by filter deadletter=1 read %d job rows (%d %.200s), over the bound of %d", rows, code, body, scanMax)
	}
	// Nothing found among the jobs read, more to read: not an error, the answer says where to go on.
	var done struct {
		Done int    `json:"done"`
		Next string `json:"next"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &done) != nil || done.Done != 0 || done.Next == "" {
		t.Fatalf("POST /api/bulk by filter, nothing found among the jobs read: %d %.300s; want 200, none done, and next", code, body)
	}

	// A filter every job matches stops at the cap and says capped, as before.
	st.rows.Store(0)
	code, body = b.do("GET", "/api/count?state=discarded", "", nil)
	cnt = struct {
		Count   int  `json:"count"`
		Capped  bool `json:"capped"`
		Partial bool `json:"partial"`
		Read    int  `json:"read"`
	}{}
	if code != 200 || json.Unmarshal([]byte(body), &cnt) != nil {
		t.Fatalf("GET /api/count?state=discarded: %d %.300s", code, body)
	}
	if rows := st.rows.Load(); rows > scanMax || cnt.Count != 10000 || !cnt.Capped || cnt.Partial {
		t.Fatalf("GET /api/count?state=discarded: %d rows read; count %d capped %v partial %v; want 10000, capped", rows, cnt.Count, cnt.Capped, cnt.Partial)
	}
}
