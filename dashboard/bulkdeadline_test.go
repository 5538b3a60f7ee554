package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// slowCancels is a PostgreSQL store whose cancel of every every-th job takes slow and ignores its
// context, as a statement waiting on a lock that cancellation does not reach; the cancel then
// lands. It counts the cancels of each job.
type slowCancels struct {
	*postgres.Store
	every int
	slow  time.Duration

	mu    sync.Mutex
	calls int
	byID  map[string]int
}

func (s *slowCancels) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	s.mu.Lock()
	n := s.calls
	s.calls++
	s.byID[id]++
	s.mu.Unlock()
	if n%s.every == 0 {
		time.Sleep(s.slow)
	}
	return s.Store.CancelJob(context.WithoutCancel(ctx), id)
}

// cancels returns how many cancels were sent, and the jobs cancelled more than once.
func (s *slowCancels) cancels() (n int, twice []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, k := range s.byID {
		if k > 1 {
			twice = append(twice, id)
		}
	}
	return s.calls, twice
}

// Bulk deadline setup: the request timeout, and the cancel of the first job of each batch of 3
// taking longer than the second the dashboard waits past it, so that a batch started near the
// deadline is still running when the 503 would replace the answer.
const (
	bulkDeadlineTimeout = 1800 * time.Millisecond
	bulkDeadlineSlow    = 1500 * time.Millisecond
	bulkDeadlineBatch   = 3
)

// bulkDeadlineSetup inserts n available jobs in queue "bulkdl" on PostgreSQL and serves a dashboard
// over them whose bulk actions run in batches of bulkDeadlineBatch.
func bulkDeadlineSetup(t *testing.T, n int) (base string, c *pronto.Client, st *slowCancels, ids []string) {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st = &slowCancels{Store: pg, every: bulkDeadlineBatch, slow: bulkDeadlineSlow, byID: map[string]int{}}
	if c, err = pronto.NewClient(st, &pronto.Config{}); err != nil {
		t.Fatal(err)
	}
	params := make([]pronto.InsertManyParams, n)
	for i := range params {
		params[i] = pronto.InsertManyParams{Args: noteArgs{Text: "x"}, Opts: &pronto.InsertOpts{Queue: "bulkdl"}}
	}
	res, err := c.InsertMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		ids = append(ids, r.ID)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 200 * time.Millisecond, RequestTimeout: bulkDeadlineTimeout})
	if err != nil {
		t.Fatal(err)
	}
	dashboard.SetBulkBatch(h, bulkDeadlineBatch)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL, c, st, ids
}

// cancelledCount is how many of ids are cancelled in the store.
func cancelledCount(t *testing.T, c *pronto.Client, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		j, err := c.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == pronto.StateCancelled {
			n++
		}
	}
	return n
}

// partialBulk is a POST /api/bulk answer with its resumption fields.
type partialBulk struct {
	bulkResponse
	Partial bool   `json:"partial"`
	Next    string `json:"next"`
}

// TestBulkStopsBeforeDeadline: a bulk action still running at the request's deadline was answered
// 503 "timed out" (the late answer dropped) while it had changed jobs, and kept changing them, with
// no word of how many; going on from the page acted on jobs twice or lost track. It now starts no
// batch that would end past the deadline, and answers 200 with what it did so far (done equals the
// jobs changed in the store), partial, and where to go on (next by filter, not_attempted by ids);
// going on so finishes the rest with no job acted on twice.
func TestBulkStopsBeforeDeadline(t *testing.T) {
	t.Parallel()
	t.Run("by filter", func(t *testing.T) {
		t.Parallel()
		base, c, st, ids := bulkDeadlineSetup(t, 9)
		b := newBrowser(t, base)
		b.open()
		filter, total := "queue=bulkdl&state=available", 0
		for rounds := 0; ; rounds++ {
			if rounds > len(ids) {
				t.Fatalf("still going after %d rounds: %d cancelled", rounds, total)
			}
			req, _ := json.Marshal(map[string]any{"action": "cancel", "filter": filter})
			code, raw := b.post("/api/bulk", string(req))
			var r partialBulk
			if code != 200 || json.Unmarshal([]byte(raw), &r) != nil || len(r.Failed) != 0 || r.Stopped != "" {
				t.Fatalf("POST /api/bulk by filter %q after %d cancelled: %d %.300s (%d cancelled in the store); want 200, nothing failed or stopped", filter, total, code, raw, cancelledCount(t, c, ids))
			}
			total += r.Done
			if got := cancelledCount(t, c, ids); got != total {
				t.Fatalf("POST /api/bulk by filter %q: %s; %d jobs cancelled in the store so far, answers say %d", filter, raw, got, total)
			}
			if r.Next == "" {
				if r.Partial || r.NotAttempted != 0 {
					t.Fatalf("last POST /api/bulk by filter: %s; want not partial", raw)
				}
				break
			}
			if !r.Partial || r.Done == 0 || r.NotAttempted != len(ids)-total {
				t.Fatalf("POST /api/bulk by filter %q stopped short: %s; want partial, done > 0, not_attempted %d", filter, raw, len(ids)-total)
			}
			filter = "queue=bulkdl&state=available&cursor=" + url.QueryEscape(r.Next)
		}
		n, twice := st.cancels()
		if total != len(ids) || n != len(ids) || len(twice) != 0 || cancelledCount(t, c, ids) != len(ids) {
			t.Fatalf("cancelled %d by the answers, %d cancels sent (twice: %v), %d cancelled; want %d each, none twice", total, n, twice, cancelledCount(t, c, ids), len(ids))
		}
	})
	t.Run("by ids", func(t *testing.T) {
		t.Parallel()
		base, c, st, ids := bulkDeadlineSetup(t, 6)
		b := newBrowser(t, base)
		b.open()
		rest, total := ids, 0
		for rounds := 0; len(rest) > 0; rounds++ {
			if rounds > len(ids) {
				t.Fatalf("still going after %d rounds: %d cancelled", rounds, total)
			}
			req, _ := json.Marshal(map[string]any{"action": "cancel", "ids": rest})
			code, raw := b.post("/api/bulk", string(req))
			var r partialBulk
			if code != 200 || json.Unmarshal([]byte(raw), &r) != nil || len(r.Failed) != 0 || r.Stopped != "" {
				t.Fatalf("POST /api/bulk %d ids: %d %.300s (%d cancelled in the store); want 200, nothing failed or stopped", len(rest), code, raw, cancelledCount(t, c, ids))
			}
			total += r.Done
			if got := cancelledCount(t, c, ids); got != total {
				t.Fatalf("POST /api/bulk %d ids: %s; %d jobs cancelled in the store, answers say %d", len(rest), raw, got, total)
			}
			if r.Partial != (r.NotAttempted > 0) || r.Done+r.NotAttempted != len(rest) {
				t.Fatalf("POST /api/bulk %d ids: %s; want done + not_attempted = %d, partial when some were not", len(rest), raw, len(rest))
			}
			rest = rest[len(rest)-r.NotAttempted:]
		}
		if n, twice := st.cancels(); n != len(ids) || len(twice) != 0 {
			t.Fatalf("%d cancels sent for %d jobs (twice: %v)", n, len(ids), twice)
		}
	})
}

// TestBulkStopsBeforeDeadlineButton: "select all matching the filter", then Cancel, on the jobs
// page goes on by itself while the server answers part of the jobs done (partial), and shows the
// total; it showed the 503 "timed out" of the first request.
func TestBulkStopsBeforeDeadlineButton(t *testing.T) {
	t.Parallel()
	base, c, st, ids := bulkDeadlineSetup(t, 9)
	u := newOpUI(t)
	u.step("open the jobs", chromedp.Navigate(base+"/#/jobs?queue=bulkdl&state=available"),
		u.wait(`document.querySelectorAll('#jobs tbody tr').length === 9`),
		u.eval(`window.confirm = () => true; true`))
	u.step("select all matching",
		chromedp.Click(`#jobs thead input[type=checkbox]`),
		chromedp.Click(chromedp.Search(`//button[normalize-space()="Select all matching the filter"]`)),
		u.wait(`document.getElementById("selcount").textContent.startsWith("All 9")`))
	u.step("cancel them",
		chromedp.Click(chromedp.Search(`//div[contains(@class,"bulkbar")]//button[normalize-space()="Cancel"]`)),
		u.wait(`document.getElementById("toast").textContent === "cancel: 9 done"`))
	if n, twice := st.cancels(); n != len(ids) || len(twice) != 0 || cancelledCount(t, c, ids) != len(ids) {
		t.Fatalf("%d cancels sent for %d jobs (twice: %v), %d cancelled", n, len(ids), twice, cancelledCount(t, c, ids))
	}
	if cls := u.str(`document.getElementById("toast").className`); strings.Contains(cls, "bad") {
		t.Fatalf("the total is shown as a failure (toast class %q)", cls)
	}
}
