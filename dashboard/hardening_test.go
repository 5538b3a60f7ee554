package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// stuckStore is a memory store whose job reads hang while stuck is open: GetJob as a driver that
// ignores its context would, ListJobs as one that honours it.
type stuckStore struct {
	*memory.Store
	stuck chan struct{}
}

func (s *stuckStore) GetJob(ctx context.Context, id string) (*store.Job, error) {
	<-s.stuck
	return s.Store.GetJob(ctx, id)
}

func (s *stuckStore) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	select {
	case <-s.stuck:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	return s.Store.ListJobs(ctx, p)
}

// TestRequestTimeout: a request whose store does not answer hung as long as the store did (here
// for ever). Now it gets a 503 naming the dashboard's request timeout, whether the store gives up
// at the request's deadline or ignores it; the event stream is not bounded by it.
func TestRequestTimeout(t *testing.T) {
	st := &stuckStore{Store: memory.New(), stuck: make(chan struct{})}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 50 * time.Millisecond, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	t.Cleanup(func() { close(st.stuck) }) // first: srv.Close waits for the requests still stuck
	// Far longer than the timeout: a request still unanswered then hangs.
	hc := &http.Client{Timeout: 20 * time.Second}
	for _, path := range []string{"/api/jobs/019ad000-0000-7000-8000-000000000001", "/api/jobs", "/api/count?state=discarded"} {
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s with the store not answering: %v; want a 503 at the request timeout", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "request timeout (300ms)") {
			t.Fatalf("GET %s with the store not answering: %d %s; want 503 naming the request timeout", path, resp.StatusCode, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("GET %s timed out with Content-Type %q", path, ct)
		}
	}

	// The event stream goes on past the timeout.
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/events: %d", resp.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	opened := time.Now()
	for deadline := time.After(30 * time.Second); ; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the event stream ended %s after it opened (request timeout %s)", time.Since(opened), timeout)
			}
			if strings.HasPrefix(l, "data:") && time.Since(opened) > 4*timeout {
				return
			}
		case <-deadline:
			t.Fatal("no event on the stream past the request timeout within 30 s")
		}
	}
}

// deadLetterSetup discards dead dead-letter jobs and kept jobs outside the dead letter queue (a
// retry policy's on_exhaustion "discard"), interleaved, and serves a dashboard over them whose
// bounds are lowered to 7 jobs per bulk action and 10 read per request.
func deadLetterSetup(t *testing.T, dead, kept int) (base string, c *pronto.Client, deadIDs, keptIDs []string) {
	t.Helper()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[noteArgs]) error {
		return errors.New("boom")
	}))
	st := memory.New(memory.WithMaxFinished(0))
	w, err := pronto.NewClient(st, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{"dlq": {MaxWorkers: 10}},
		Workers: workers, PollInterval: 20 * time.Millisecond, DisableMaintenance: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	for i := 0; i < dead+kept; i++ {
		opts := &pronto.InsertOpts{Queue: "dlq", MaxAttempts: 1}
		isDead := i%2 == 0 && len(deadIDs) < dead || len(keptIDs) == kept
		if !isDead {
			opts.Meta = map[string]any{"_pronto": map[string]any{"oe": "discard"}}
		}
		res, err := w.Insert(bg, noteArgs{Text: "d"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if isDead {
			deadIDs = append(deadIDs, res.ID)
		} else {
			keptIDs = append(keptIDs, res.ID)
		}
	}
	if err := w.Start(bg); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		qs, err := w.QueueList(bg)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, q := range qs {
			n += q.Counts[pronto.StateDiscarded]
		}
		if n == int64(dead+kept) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs discarded after 60 s", n, dead+kept)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// No worker from here on: a replayed job stays available.
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err = pronto.NewClient(st, &pronto.Config{}); err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dashboard.SetMatchBounds(h, 7, 10)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL, c, deadIDs, keptIDs
}

// checkReplayed fails unless exactly the dead jobs left the discarded state.
func checkReplayed(t *testing.T, c *pronto.Client, deadIDs, keptIDs []string) {
	t.Helper()
	for _, id := range deadIDs {
		j, err := c.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != pronto.StateAvailable {
			t.Fatalf("dead-letter job %s is %s after replaying every dead-letter job; want available", id, j.State)
		}
	}
	for _, id := range keptIDs {
		j, err := c.JobGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != pronto.StateDiscarded {
			t.Fatalf("job %s outside the dead letter queue is %s after the replay; want discarded", id, j.State)
		}
	}
}

// TestReplayEveryDeadLetterResumes: "Replay every dead-letter job" replayed what one count found,
// at most 10,000 jobs among the first 11,000 read (here, with the bounds lowered, 7 among 10), and
// the rest of the dead letter queue was out of its reach. The count now says where it stopped
// (next), and the page, or a script, goes on from there until the whole queue is replayed.
func TestReplayEveryDeadLetterResumes(t *testing.T) {
	type countAnswer struct {
		Count   int      `json:"count"`
		IDs     []string `json:"ids"`
		Next    string   `json:"next"`
		Capped  bool     `json:"capped"`
		Partial bool     `json:"partial"`
	}
	t.Run("count then replay by ids, as the page does", func(t *testing.T) {
		base, c, deadIDs, keptIDs := deadLetterSetup(t, 30, 25)
		b := newBrowser(t, base)
		b.open()
		var replayed []string
		path := "/api/count?deadletter=1"
		for rounds := 0; ; rounds++ {
			if rounds > 100 {
				t.Fatalf("still going after %d rounds: %d replayed", rounds, len(replayed))
			}
			code, body := b.do("GET", path, "", nil)
			var cnt countAnswer
			if code != 200 || json.Unmarshal([]byte(body), &cnt) != nil {
				t.Fatalf("GET %s: %d %.300s", path, code, body)
			}
			if len(cnt.IDs) > 7 {
				t.Fatalf("GET %s: %d ids, over the bound of 7", path, len(cnt.IDs))
			}
			if len(cnt.IDs) > 0 {
				req, _ := json.Marshal(map[string]any{"action": "retry", "ids": cnt.IDs})
				code, body := b.post("/api/bulk", string(req))
				var done struct {
					Done int `json:"done"`
				}
				if code != 200 || json.Unmarshal([]byte(body), &done) != nil || done.Done != len(cnt.IDs) {
					t.Fatalf("replaying %d counted jobs: %d %.300s", len(cnt.IDs), code, body)
				}
				replayed = append(replayed, cnt.IDs...)
			}
			if cnt.Next == "" {
				break
			}
			path = "/api/count?deadletter=1&cursor=" + url.QueryEscape(cnt.Next)
		}
		slices.Sort(replayed)
		want := slices.Clone(deadIDs)
		slices.Sort(want)
		if !slices.Equal(replayed, want) {
			t.Fatalf("replayed %d jobs, want the %d dead-letter jobs, each once", len(replayed), len(want))
		}
		checkReplayed(t, c, deadIDs, keptIDs)
	})
	t.Run("bulk by filter, as a script does", func(t *testing.T) {
		base, c, deadIDs, keptIDs := deadLetterSetup(t, 30, 25)
		b := newBrowser(t, base)
		b.open()
		filter, total := "deadletter=1", 0
		for rounds := 0; ; rounds++ {
			if rounds > 100 {
				t.Fatalf("still going after %d rounds: %d replayed", rounds, total)
			}
			req, _ := json.Marshal(map[string]any{"action": "retry", "filter": filter})
			code, body := b.post("/api/bulk", string(req))
			var done struct {
				Done   int               `json:"done"`
				Failed []json.RawMessage `json:"failed"`
				Next   string            `json:"next"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &done) != nil || len(done.Failed) != 0 || done.Done > 7 {
				t.Fatalf("POST /api/bulk by filter %q: %d %.300s", filter, code, body)
			}
			total += done.Done
			if done.Next == "" {
				break
			}
			filter = "deadletter=1&cursor=" + url.QueryEscape(done.Next)
		}
		if total != len(deadIDs) {
			t.Fatalf("replayed %d jobs by filter, want %d", total, len(deadIDs))
		}
		checkReplayed(t, c, deadIDs, keptIDs)
	})
}

// loginAt posts key to h's /login from addr (a RemoteAddr) with the extra headers hdr.
func loginAt(h http.Handler, addr, key string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// fakeClock is a time the test moves on by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestLoginThrottle: /login checked every key it was sent, as fast as it was sent. Now an address
// gets five tries, then waits (429 with Retry-After, the key not even checked) a second, twice as
// long after each further wrong key; while wrong keys pour in from many addresses, every address
// gets one free try. Another address, the operator's, logs in all along.
func TestLoginThrottle(t *testing.T) {
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	newHandler := func(trustProxy bool) (*dashboard.Handler, *fakeClock) {
		h, err := dashboard.New(dashboard.Config{Client: c, APIKey: "k3y", Tick: time.Second, TrustForwardedProto: trustProxy})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		dashboard.SetLoginClock(h, clock.now)
		return h, clock
	}
	loggedIn := func(rec *httptest.ResponseRecorder) bool {
		for _, ck := range rec.Result().Cookies() {
			if ck.Name == dashboard.CookieName && ck.Value != "" {
				return true
			}
		}
		return false
	}
	wrong := func(rec *httptest.ResponseRecorder) bool {
		return rec.Code == http.StatusSeeOther && strings.Contains(rec.Header().Get("Location"), "error")
	}
	throttled := func(rec *httptest.ResponseRecorder, retryAfter string) bool {
		return rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == retryAfter && !loggedIn(rec)
	}

	h, clock := newHandler(false)
	const attacker, operator = "203.0.113.7:40000", "198.51.100.9:50000"
	for i := 1; i <= 5; i++ {
		if rec := loginAt(h, attacker, fmt.Sprintf("guess%d", i), nil); !wrong(rec) {
			t.Fatalf("wrong key %d of 5: %d %v; want a redirect to the login page's error", i, rec.Code, rec.Header())
		}
	}
	if rec := loginAt(h, attacker, "guess6", nil); !throttled(rec, "1") {
		t.Fatalf("a 6th wrong key at once: %d %v; want 429 with Retry-After 1", rec.Code, rec.Header())
	}
	// Not checked while waiting, so the right key does not get in either (a guesser learns nothing).
	if rec := loginAt(h, attacker, "k3y", nil); !throttled(rec, "1") || !strings.Contains(rec.Body.String(), "Too many wrong keys") {
		t.Fatalf("the right key from the waiting address: %d %v %.200s; want 429", rec.Code, rec.Header(), rec.Body)
	}
	// A header anyone can send changes nothing without a trusted proxy.
	if rec := loginAt(h, attacker, "k3y", map[string]string{"X-Forwarded-For": "192.0.2.1"}); !throttled(rec, "1") {
		t.Fatalf("the waiting address with a forged X-Forwarded-For: %d %v; want 429", rec.Code, rec.Header())
	}
	if rec := loginAt(h, operator, "k3y", nil); !loggedIn(rec) {
		t.Fatalf("the right key from another address while one waits: %d %v; want logged in", rec.Code, rec.Header())
	}
	clock.add(time.Second)
	if rec := loginAt(h, attacker, "guess7", nil); !wrong(rec) {
		t.Fatalf("a wrong key after the wait: %d %v; want it checked", rec.Code, rec.Header())
	}
	if rec := loginAt(h, attacker, "guess8", nil); !throttled(rec, "2") {
		t.Fatalf("the next wrong key at once: %d %v; want 429 with Retry-After 2 (doubled)", rec.Code, rec.Header())
	}
	clock.add(2 * time.Second)
	if rec := loginAt(h, attacker, "k3y", nil); !loggedIn(rec) {
		t.Fatalf("the right key after the wait: %d %v; want logged in", rec.Code, rec.Header())
	}
	// Logged in: the address starts afresh.
	if rec := loginAt(h, attacker, "guess9", nil); !wrong(rec) {
		t.Fatalf("a wrong key after a login: %d %v; want it checked", rec.Code, rec.Header())
	}
	// An IPv6 client holds its /64 whole: another address in it shares its tries.
	for i := 0; i < 5; i++ {
		loginAt(h, fmt.Sprintf("[2001:db8:1:2::%x]:1234", i+1), "nope", nil)
	}
	if rec := loginAt(h, "[2001:db8:1:2::ff]:1234", "k3y", nil); !throttled(rec, "1") {
		t.Fatalf("a 6th try from the same IPv6 /64: %d %v; want 429", rec.Code, rec.Header())
	}

	// A spray from many addresses, one wrong key each, spends the global budget: then one wrong
	// key makes an address wait, but a fresh address is checked at once.
	h, clock = newHandler(false)
	for i := 0; i < 40; i++ {
		if rec := loginAt(h, fmt.Sprintf("192.0.2.%d:1000", i+1), "spray", nil); !wrong(rec) {
			t.Fatalf("the first wrong key from spraying address %d: %d; want it checked", i+1, rec.Code)
		}
	}
	if rec := loginAt(h, "192.0.2.1:1000", "spray2", nil); !throttled(rec, "1") {
		t.Fatalf("a second wrong key from a spraying address: %d %v; want 429 with Retry-After 1", rec.Code, rec.Header())
	}
	if rec := loginAt(h, operator, "k3y", nil); !loggedIn(rec) {
		t.Fatalf("the right key from a fresh address during a spray: %d %v; want logged in", rec.Code, rec.Header())
	}
	// The operator mistyping once during the spray waits a second, not for the spray to stop.
	const typo = "198.51.100.10:50000"
	loginAt(h, typo, "k3", nil)
	clock.add(time.Second)
	if rec := loginAt(h, typo, "k3y", nil); !loggedIn(rec) {
		t.Fatalf("the right key a second after a typo, during a spray: %d %v; want logged in", rec.Code, rec.Header())
	}

	// Behind a trusted proxy every browser comes from the proxy's address: tries count by the
	// address the proxy appended to X-Forwarded-For.
	h, _ = newHandler(true)
	const proxy = "10.0.0.1:3000"
	for i := 0; i < 6; i++ {
		loginAt(h, proxy, "nope", map[string]string{"X-Forwarded-For": "1.2.3.4, 203.0.113.7"})
	}
	if rec := loginAt(h, proxy, "k3y", map[string]string{"X-Forwarded-For": "203.0.113.7"}); !throttled(rec, "1") {
		t.Fatalf("the throttled client behind the proxy: %d %v; want 429", rec.Code, rec.Header())
	}
	if rec := loginAt(h, proxy, "k3y", map[string]string{"X-Forwarded-For": "203.0.113.7, 198.51.100.9"}); !loggedIn(rec) {
		t.Fatalf("another client behind the same proxy: %d %v; want logged in", rec.Code, rec.Header())
	}
}

// TestStaticNoListing: /static/ answered the listing of the assets directory; now a directory
// is 404 and the files are served as before.
func TestStaticNoListing(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{APIKey: "k3y"})
	for path, want := range map[string]int{"/static/": 404, "/static/app.js": 200, "/static/app.css": 200, "/static/nothing.js": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || strings.Contains(string(body), `<a href="app.js">`) {
			t.Fatalf("GET %s: %d %.200s; want %d and no listing", path, resp.StatusCode, body, want)
		}
	}
}

// TestReplayEveryDeadLetterButton: the dead-letter page's "Replay every dead-letter job" goes on
// part by part (the bounds lowered to 7 jobs per part, 10 read) until every dead-letter job is
// replayed; it replayed the first part only.
func TestReplayEveryDeadLetterButton(t *testing.T) {
	// More than a page (100), so that the page offers the button.
	base, c, deadIDs, keptIDs := deadLetterSetup(t, 120, 30)
	u := newOpUI(t)
	u.step("open the dead letter", chromedp.Navigate(base+"/#/deadletter"),
		u.wait(`document.querySelectorAll('#deadletter tbody tr').length > 0`),
		u.eval(`window.confirm = (msg) => { window.__confirmed = msg; return true; }; true`))
	u.step("replay every dead-letter job",
		chromedp.Click(chromedp.Search(`//button[normalize-space()="Replay every dead-letter job"]`)),
		u.waitFor(`document.getElementById("toast").textContent === "replay: 120 done"`, 60*time.Second))
	if msg := u.str(`window.__confirmed`); !strings.Contains(msg, "more follow") {
		t.Fatalf("the confirmation %q does not say the replay goes on past its first part", msg)
	}
	checkReplayed(t, c, deadIDs, keptIDs)
}
