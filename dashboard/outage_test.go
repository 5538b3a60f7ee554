package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// A page opened while the store is down shows the banner and the view's 503; once the store answers
// again and the page says "live", the view must show the live numbers again rather than keep the
// error it opened with.
func TestViewOpenedDuringOutageRecovers(t *testing.T) {
	st := &flakyStore{Store: memory.New()}
	base, c := st.serve(t, nil)
	if _, err := c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "revq"}); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	u := newOpUI(t)
	u.step("the overview opened while the store is down", chromedp.Navigate(base+"/#/"),
		u.wait(`!document.getElementById("banner").hidden && document.querySelector("main .error") !== null`))
	st.down.Store(false)
	u.step("the store is back: the page says live", u.wait(`document.querySelector("#live.on") !== null && document.getElementById("banner").hidden`))
	// A bound on the wait, not a timing assertion: the hub ticks every 200 ms.
	if err := chromedp.Do(u.ctx, u.waitFor(`document.querySelector('td[data-q="revq"][data-s="available"]') !== null && document.querySelector("main .error") === null`, 10*time.Second)); err != nil {
		body := u.str(`document.querySelector("main").innerText.slice(0, 400)`)
		t.Fatalf("the store answers again and the page says \"live\", but the overview opened during the outage never shows the queues: %v\nmain:\n%s", err, body)
	}
}

// downStore is a memory store whose job reads and retries fail as an unreachable database's would
// while down is set, or once more than downAfter retries were tried (0: never); it counts the
// retries tried.
type downStore struct {
	*memory.Store
	down      atomic.Bool
	downAfter atomic.Int64
	retries   atomic.Int64
}

func (s *downStore) GetJob(ctx context.Context, id string) (*store.Job, error) {
	if s.down.Load() {
		return nil, errRefused
	}
	return s.Store.GetJob(ctx, id)
}

func (s *downStore) RetryJob(ctx context.Context, id string) (*store.Job, error) {
	n := s.retries.Add(1)
	if after := s.downAfter.Load(); s.down.Load() || after > 0 && n > after {
		return nil, errRefused
	}
	return s.Store.RetryJob(ctx, id)
}

// bulkResponse is a POST /api/bulk answer.
type bulkResponse struct {
	Done   int `json:"done"`
	Failed []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"failed"`
	Stopped      string `json:"stopped"`
	NotAttempted int    `json:"not_attempted"`
	Error        string `json:"error"`
}

// A bulk action stops at the first job the store cannot be reached for, rather than try every id
// against a dead store, and says so as a single job's action would: 503 "store unreachable: <kind>"
// when nothing was done, else the jobs done and how many were not attempted (the job the store
// failed for among them).
// The driver's text, which names the host and port, is never shown.
func TestBulkActionStopsWhenStoreUnreachable(t *testing.T) {
	st := &downStore{Store: memory.New()}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	bg := context.Background()
	// More ids than one client bulk call takes, all cancelled so that a retry applies to each.
	const n = pronto.MaxBulkIDs + 250
	batch := make([]pronto.InsertManyParams, 0, 250)
	var ids []string
	for i := 0; i < n; i++ {
		batch = append(batch, pronto.InsertManyParams{Args: noteArgs{Text: fmt.Sprint(i)}})
		if len(batch) == cap(batch) {
			res, err := c.InsertMany(bg, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				ids = append(ids, r.ID)
			}
			batch = batch[:0]
		}
	}
	for _, id := range ids {
		if _, err := c.JobCancel(bg, id); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, srv.URL)
	b.open()
	retry := func(t *testing.T, ids []string) (int, string, bulkResponse) {
		t.Helper()
		req, _ := json.Marshal(map[string]any{"action": "retry", "ids": ids})
		code, body := b.post("/api/bulk", string(req))
		var r bulkResponse
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("POST /api/bulk: %d %.300s: %v", code, body, err)
		}
		if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "5432") {
			t.Fatalf("POST /api/bulk: %d %.300s: the answer carries the store's address (the driver's text)", code, body)
		}
		return code, body, r
	}
	const unreachable = "store unreachable: cannot connect to the store"

	t.Run("down from the start", func(t *testing.T) {
		st.down.Store(true)
		defer st.down.Store(false)
		before := st.retries.Load()
		code, body, r := retry(t, ids)
		if tried := st.retries.Load() - before; code != 503 || r.Error != unreachable || tried != 1 {
			t.Fatalf("POST /api/bulk retrying %d jobs while the store is unreachable: %d %.300s after %d store retries; want 503 %q after one", n, code, body, tried, unreachable)
		}
	})

	t.Run("down midway", func(t *testing.T) {
		const first = 5
		st.downAfter.Store(st.retries.Load() + first)
		defer st.downAfter.Store(0)
		code, body, r := retry(t, ids)
		tried := st.retries.Load()
		if code != 200 || r.Done != first || r.Stopped != unreachable || r.NotAttempted != n-first || len(r.Failed) != 0 {
			t.Fatalf("POST /api/bulk retrying %d jobs, the store lost after %d: %d %.400s; want 200 with %d done, stopped %q and %d not attempted",
				n, first, code, body, first, unreachable, n-first)
		}
		if want := st.downAfter.Load() + 1; tried != want {
			t.Fatalf("the store was tried %d times in all, want %d: once after it went down, not once per remaining id", tried, want)
		}
		for _, id := range ids[:first] {
			if j, err := c.JobGet(bg, id); err != nil || j.State != pronto.StateAvailable {
				t.Fatalf("job %s reported done: %+v, %v; want available", id, j, err)
			}
		}
	})
}
