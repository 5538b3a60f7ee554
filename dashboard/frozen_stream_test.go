package dashboard_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// freezeProxy is a proxy in front of the dashboard whose event streams can be frozen as a vanished
// host or a stalled network path freezes them: no byte passes and no connection is closed. While
// frozen, a new stream request is held before its response headers too. Other requests pass.
type freezeProxy struct {
	target   *url.URL
	rp       *httputil.ReverseProxy
	inflight atomic.Int64
	total    atomic.Int64
	mu       sync.Mutex
	thaw     chan struct{} // non-nil while frozen; closed on resume
}

func (p *freezeProxy) freeze() { p.mu.Lock(); p.thaw = make(chan struct{}); p.mu.Unlock() }
func (p *freezeProxy) resume() {
	p.mu.Lock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
	p.mu.Unlock()
}

// hold waits while the proxy is frozen; false if the client went away meanwhile.
func (p *freezeProxy) hold(ctx context.Context) bool {
	p.mu.Lock()
	thaw := p.thaw
	p.mu.Unlock()
	if thaw == nil {
		return true
	}
	select {
	case <-thaw:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *freezeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/events" {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.total.Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	ctx := r.Context()
	if !p.hold(ctx) {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.target.String()+"/api/events", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.(http.Flusher).Flush()
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if !p.hold(ctx) {
				return
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		if err != nil {
			return
		}
	}
}

// A stream that goes silent without closing (the server's host vanished, no FIN) is noticed by the
// page from the server's missing pings: it says "disconnected: reconnecting", closes the stream and
// retries; once the path passes bytes again the page is live with one stream, through the proxy
// and on the server, without reloading. Before the pings and the page's watchdog, it stayed "live".
func TestLiveStreamFrozenWithoutClose(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "frozen.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Backend: "sqlite", PingInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	back := httptest.NewServer(h)
	t.Cleanup(back.Close)
	target, _ := url.Parse(back.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &freezeProxy{target: target, rp: rp}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	t.Cleanup(p.resume) // the held handlers end before the servers close

	if _, err := c.Insert(ctx, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "fz"}); err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("overview live", chromedp.Navigate(front.URL+"/"),
		u.wait(availableCell("fz")+` === "1" && document.querySelector("#live.on") !== null`),
		u.eval(`window.__noReload = 1`))

	p.freeze()
	// Three missed pings of 300 ms; ten seconds leave room for a loaded machine.
	u.step("the page says it is disconnected", u.waitFor(`document.querySelector("#live.on") === null && `+
		`document.getElementById("live").textContent === "disconnected: reconnecting" && !document.getElementById("banner").hidden`, 10*time.Second))
	// It keeps retrying while frozen, one attempt at a time.
	before := p.total.Load()
	deadline := time.Now().Add(20 * time.Second)
	for p.total.Load() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the page stopped retrying its frozen stream (%d tries)", p.total.Load()-before)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if _, err := c.Insert(ctx, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "fz"}); err != nil {
		t.Fatal(err)
	}
	p.resume()
	u.step("live again with the new counts", u.wait(`document.querySelector("#live.on") !== null && document.getElementById("banner").hidden`),
		u.wait(availableCell("fz")+` === "2"`))
	u.step("ticks pass", u.eval(`window.__ticks = 0; live.listeners.add(() => { window.__ticks++; })`), u.wait(`window.__ticks >= 3`))
	waitStreams(t, 1)
	deadline = time.Now().Add(10 * time.Second)
	for p.inflight.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d event streams in flight through the proxy after it resumed, want 1", p.inflight.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u.str(`String(live.es.readyState)`) != "1" {
		t.Fatal("the page's one stream is not open")
	}
	if u.str(`String(window.__noReload)`) != "1" {
		t.Fatal("the page reloaded itself to recover")
	}
}
