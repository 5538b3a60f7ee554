package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// rowCountingStore is an SQLite store that counts the job rows its lists return.
type rowCountingStore struct {
	*sqlite.Store
	rows atomic.Int64
}

func (s *rowCountingStore) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	jobs, next, err := s.Store.ListJobs(ctx, p)
	s.rows.Add(int64(len(jobs)))
	return jobs, next, err
}

// scanBoomArgs is a job whose Go worker always fails, so that with one attempt it is discarded.
type scanBoomArgs struct{}

func (scanBoomArgs) Kind() string { return "scan.boom" }

// discardedServer returns a server over an SQLite store holding n discarded jobs of queue "dl",
// dead-letter ones unless kept (a retry policy's on_exhaustion "discard"), and the store.
func discardedServer(t *testing.T, n int, kept bool) (*Server, *rowCountingStore) {
	t.Helper()
	ctx := context.Background()
	sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	if err := sq.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st := &rowCountingStore{Store: sq}
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[scanBoomArgs]) error {
		return errors.New("boom")
	}))
	client, err := pronto.NewClient(st, &pronto.Config{
		Queues: map[string]pronto.QueueConfig{"dl": {MaxWorkers: 50}}, Workers: workers,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	var meta map[string]any
	if kept {
		meta = map[string]any{"_pronto": map[string]any{"oe": "discard"}}
	}
	for done := 0; done < n; {
		batch := make([]pronto.InsertManyParams, min(1000, n-done))
		for i := range batch {
			batch[i] = pronto.InsertManyParams{Args: scanBoomArgs{}, Opts: &pronto.InsertOpts{Queue: "dl", MaxAttempts: 1, Meta: meta}}
		}
		if _, err := client.InsertMany(ctx, batch); err != nil {
			t.Fatal(err)
		}
		done += len(batch)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		qs, err := client.QueueList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var discarded int64
		for _, q := range qs {
			discarded += q.Counts[pronto.StateDiscarded]
		}
		if discarded == int64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs discarded", discarded, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s, st
}

// TestDeadLetterListScanBounded: GET /ojs/v1/dead-letter reads at most adminScanLimit jobs, as every
// other list that filters jobs in the server does (admin job lists, dead-letter stats): an offset
// beyond what a bounded read can reach is refused 400 naming it (follow next_cursor instead), and a
// page the bound cuts short (discarded jobs that are not dead letter) says has_more with a
// next_cursor that goes on. Before, offset=1000000000 read every discarded job in the store and
// answered 200, and a store full of kept discarded jobs was read whole for one page.
func TestDeadLetterListScanBounded(t *testing.T) {
	n := adminScanLimit + 100
	t.Run("deep offset", func(t *testing.T) {
		s, st := discardedServer(t, n, false)
		st.rows.Store(0)
		r := call(t, s, "GET", "/ojs/v1/dead-letter?offset=1000000000", nil)
		if r.status != 400 {
			t.Fatalf("offset=1000000000: %d (%d job rows read) %s", r.status, st.rows.Load(), r.raw)
		}
		if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "offset" {
			t.Fatalf("details.field %v: %s", f, r.raw)
		}
		// The deepest offset allowed still reads at most the bound.
		st.rows.Store(0)
		r = call(t, s, "GET", fmt.Sprintf("/ojs/v1/dead-letter?offset=%d&limit=10", adminScanLimit-1), nil)
		if r.status != 200 {
			t.Fatalf("offset=%d: %d %s", adminScanLimit-1, r.status, r.raw)
		}
		if rows := st.rows.Load(); rows > adminScanLimit {
			t.Fatalf("one page read %d job rows, over the bound of %d", rows, adminScanLimit)
		}
		// A shallow page is whole, as before.
		r = call(t, s, "GET", "/ojs/v1/dead-letter?offset=10&limit=5", nil)
		if jobs, _ := r.body["jobs"].([]any); r.status != 200 || len(jobs) != 5 {
			t.Fatalf("offset=10&limit=5: %d %s", r.status, r.raw)
		}
	})
	t.Run("kept discarded jobs", func(t *testing.T) {
		s, st := discardedServer(t, n, true)
		st.rows.Store(0)
		r := call(t, s, "GET", "/ojs/v1/dead-letter?limit=10", nil)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		if rows := st.rows.Load(); rows > adminScanLimit {
			t.Fatalf("one page read %d job rows, over the bound of %d", rows, adminScanLimit)
		}
		if jobs, _ := r.body["jobs"].([]any); len(jobs) != 0 {
			t.Fatalf("kept discarded jobs listed as dead letter: %s", r.raw)
		}
		p := r.body["pagination"].(map[string]any)
		next, _ := p["next_cursor"].(string)
		if p["has_more"] != true || next == "" {
			t.Fatalf("a page cut short by the bound says no more: %v", p)
		}
		// The cursor goes on, to the end of the list.
		r = call(t, s, "GET", "/ojs/v1/dead-letter?limit=10&cursor="+next, nil)
		if r.status != 200 {
			t.Fatalf("next page: %d %s", r.status, r.raw)
		}
		if p := r.body["pagination"].(map[string]any); p["has_more"] != false {
			t.Fatalf("the last page says more follow: %v", p)
		}
	})
}
