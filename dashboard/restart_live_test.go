package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// restartRig is `pronto serve` over a SQLite file on a fixed address that a test stops and starts
// again (each start a new server: sessions, CSRF secret and event log of its own), and a client on
// the same file.
type restartRig struct {
	t    *testing.T
	addr string
	path string
	stop func()
	c    *pronto.Client
}

func newRestartRig(t *testing.T) *restartRig {
	t.Helper()
	r := &restartRig{t: t, addr: freeAddr(t), path: filepath.Join(t.TempDir(), "live.db")}
	r.start()
	st, err := sqlite.Open(context.Background(), r.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if r.c, err = pronto.NewClient(st, &pronto.Config{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *restartRig) start() string {
	r.t.Helper()
	base, stop := opServe(r.t, nil, r.addr, "--database-url", "sqlite:"+r.path)
	r.stop = stop
	return base
}

func (r *restartRig) insert(queue string, n int) {
	r.t.Helper()
	for range n {
		if _, err := r.c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: queue}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// waitStreams waits until this process holds exactly want open event streams.
func waitStreams(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		open, _ := dashboard.StreamCounts()
		if open == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d event streams open on the server, want %d", open, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// availableCell is the overview's count of available jobs in queue q.
func availableCell(q string) string {
	return fmt.Sprintf(`(document.querySelector('td[data-q="%s"][data-s="available"]') || {}).textContent`, q)
}

// The live page across a restart of `pronto serve` on the same port: while the server is gone the
// page says it is not live; once a new server answers, the page's event stream reconnects by
// itself, its counts show what changed meanwhile without a reload, a view opened during the outage
// loads, and the page holds one event stream (counted on the server), not one per retry.
func TestLiveStreamAcrossServeRestart(t *testing.T) {
	r := newRestartRig(t)
	r.insert("rs", 1)
	u := newOpUI(t)
	base := "http://" + r.addr
	u.step("overview live", chromedp.Navigate(base+"/"),
		u.wait(availableCell("rs")+` === "1" && document.querySelector("#live.on") !== null && live.lastUpdate > 0`),
		u.eval(`window.__noReload = 1`))
	waitStreams(t, 1)

	r.stop()
	u.step("the page says it is disconnected", u.wait(`document.querySelector("#live.on") === null && document.getElementById("live").textContent !== "live"`))
	// The indicator says so, and so does a banner, as for a store that cannot be read: the
	// numbers on the page are those of the last update, not live.
	u.step("the banner says the numbers are not live", u.wait(`!document.getElementById("banner").hidden`))
	ind, banner := u.str(`document.getElementById("live").textContent`), u.str(`document.getElementById("banner").textContent`)
	if !strings.Contains(ind, "disconnected") || !strings.HasPrefix(banner, "disconnected from the server: reconnecting (the numbers shown are from ") {
		t.Fatalf("with the server gone the indicator says %q and the banner %q", ind, banner)
	}
	waitStreams(t, 0)
	r.insert("rs", 2)
	// A view opened while the server is gone fails its read; it must load once the stream is back.
	u.step("open the jobs list during the outage", u.eval(`location.hash = "#/jobs?queue=rs"`),
		u.wait(`document.querySelector("main .error") !== null`))

	_, started := dashboard.StreamCounts()
	r.start()
	u.step("live again, the view opened during the outage loads", u.wait(`document.querySelector("#live.on") !== null && document.getElementById("banner").hidden`),
		u.wait(`document.querySelectorAll("#jobs tbody tr").length === 3 && document.querySelector("main .error") === null`))
	u.step("back to the overview: counts of the new server", u.eval(`location.hash = "#/"`),
		u.wait(availableCell("rs")+` === "3"`))
	r.insert("rs", 1)
	u.step("counts follow the new server's stream", u.wait(availableCell("rs")+` === "4"`))
	if u.str(`String(window.__noReload)`) != "1" {
		t.Fatal("the page reloaded itself to recover")
	}
	// Several ticks later (one a second) the page still holds one stream, and opened no other.
	u.step("ticks pass", u.eval(`window.__ticks = 0; live.listeners.add(() => { window.__ticks++; })`), u.wait(`window.__ticks >= 3`))
	waitStreams(t, 1)
	if _, now := dashboard.StreamCounts(); now-started != 1 {
		t.Fatalf("the page opened %d event streams on the restarted server, want 1", now-started)
	}
}

// proxyCount is a reverse proxy in front of a restartable server, as nginx would be: while the
// server is gone it answers 502, which an EventSource never retries by itself. It counts the event
// streams in flight and records every stream request's query and Last-Event-ID, and any 400.
type proxyCount struct {
	inflight, total atomic.Int64
	mu              sync.Mutex
	odd             []string
}

func (p *proxyCount) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/events" {
			p.total.Add(1)
			p.inflight.Add(1)
			defer p.inflight.Add(-1)
			if r.URL.RawQuery != "" || r.Header.Get("Last-Event-ID") != "" {
				p.mu.Lock()
				p.odd = append(p.odd, fmt.Sprintf("GET /api/events?%s Last-Event-ID %q", r.URL.RawQuery, r.Header.Get("Last-Event-ID")))
				p.mu.Unlock()
			}
		}
		rec := &statusRec{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.code == http.StatusBadRequest {
			p.mu.Lock()
			p.odd = append(p.odd, "400 for "+r.URL.String())
			p.mu.Unlock()
		}
	})
}

type statusRec struct {
	http.ResponseWriter
	code int
}

func (s *statusRec) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }
func (s *statusRec) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Behind a proxy that answers 502 while the server restarts, the page's refused stream is
// reconnected by the page (one retry chain, not one per failure): once the new server answers the
// page is live again with its counts, holds one stream, and never sends the old server's event
// position (the new server would refuse a foreign cursor).
func TestLiveStreamBehindProxyAcrossRestart(t *testing.T) {
	r := newRestartRig(t)
	r.insert("px", 1)
	target, _ := url.Parse("http://" + r.addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // its refused dials are the point
	var p proxyCount
	front := httptest.NewServer(p.wrap(rp))
	t.Cleanup(front.Close)

	u := newOpUI(t)
	u.step("overview live", chromedp.Navigate(front.URL+"/"),
		u.wait(availableCell("px")+` === "1" && document.querySelector("#live.on") !== null`),
		u.eval(`window.__noReload = 1`))
	r.stop()
	u.step("the page says it is disconnected", u.wait(`document.querySelector("#live.on") === null`))
	// The page retries through the proxy's 502s: wait for a few refusals, then bring the server back.
	before := p.total.Load()
	deadline := time.Now().Add(30 * time.Second)
	for p.total.Load() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the page stopped retrying its event stream after the proxy's 502 (%d tries)", p.total.Load()-before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.insert("px", 1)
	r.start()
	u.step("live again with the new counts", u.wait(`document.querySelector("#live.on") !== null`),
		u.wait(availableCell("px")+` === "2"`))
	u.step("ticks pass", u.eval(`window.__ticks = 0; live.listeners.add(() => { window.__ticks++; })`), u.wait(`window.__ticks >= 4`))
	if n := p.inflight.Load(); n != 1 {
		t.Fatalf("%d event streams in flight through the proxy after the restart, want 1", n)
	}
	if u.str(`String(window.__noReload)`) != "1" {
		t.Fatal("the page reloaded itself to recover")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.odd) > 0 {
		t.Fatalf("the page's stream requests carried an event position, or were refused 400: %q", p.odd)
	}
}
