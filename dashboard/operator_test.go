package dashboard_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/internal/cli"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// opUI is a headless Chromium driven the way browserScenario drives it.
type opUI struct {
	t    *testing.T
	bctx context.Context
	ctx  context.Context

	mu     sync.Mutex
	jsErrs []string
}

func newOpUI(t *testing.T) *opUI {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 150*time.Second)
	t.Cleanup(func() { cancel(); cancelBrowser(); cancelAlloc() })
	u := &opUI{t: t, bctx: bctx, ctx: ctx}
	if err := chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			u.mu.Lock()
			u.jsErrs = append(u.jsErrs, e.ExceptionDetails.Text)
			u.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *opUI) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	u.t.Helper()
	if err := chromedp.Do(u.ctx, actions...); err != nil {
		loc, _ := chromedp.Run(u.bctx, chromedp.Location())
		body, _ := chromedp.Run(u.bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 1500) : ""`))
		u.t.Fatalf("%s: %v\n(page %s)\npage text:\n%s", what, err, loc, body)
	}
}

// waitFor polls a JavaScript condition until it holds (never a sleep).
func (u *opUI) waitFor(cond string, within time.Duration) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		deadline := time.Now().Add(within)
		for {
			ok, err := chromedp.Evaluate[bool](cond)(ctx, tg)
			if err == nil && ok {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("condition %s still false after %s (last error: %v)", cond, within, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

func (u *opUI) wait(cond string) chromedp.Action[chromedp.Void] {
	return u.waitFor(cond, 30*time.Second)
}

func (u *opUI) eval(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](js)(ctx, tg)
		return err
	})
}

func (u *opUI) str(js string) string {
	u.t.Helper()
	s, err := chromedp.Run(u.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		u.t.Fatalf("evaluate %s: %v", js, err)
	}
	return s
}

// opDashboard serves a dashboard over a memory store through an httptest server, with a second
// client (working queue "default") on the same store when work is not nil.
func opDashboard(t *testing.T, cfg dashboard.Config) (string, *pronto.Client) {
	t.Helper()
	st := memory.New()
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client = c
	cfg.Tick = 200 * time.Millisecond
	h, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL, c
}

// opServe runs `pronto serve` in this process on addr and returns its base URL and a stop
// function that waits for it to end.
func opServe(t *testing.T, env map[string]string, addr string, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := cli.Run(ctx, append([]string{"serve", "--addr", addr}, args...),
			cli.Env{Stdout: pw, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }})
		pw.Close()
		done <- code
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "OJS HTTP API on http://"); ok && !sent {
				host, _, _ := strings.Cut(rest, "/")
				ready <- "http://" + host
				sent = true
			}
		}
		close(ready)
	}()
	var base string
	select {
	case base = <-ready:
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("pronto serve was not ready within 30 s")
	}
	if base == "" {
		cancel()
		t.Fatalf("pronto serve exited with %d before it was ready", <-done)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("pronto serve did not stop within 30 s")
			}
		})
	}
	t.Cleanup(stop)
	return base, stop
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A tag is free text; the job page links each tag to the jobs list filtered by it.
func TestTagLinkWithComma(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	j, err := c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Tags: []string{"region:eu,us"}})
	if err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("job page", chromedp.Navigate(base+"/#/job/"+j.ID), u.wait(`document.querySelector('a[href^="#/jobs?tag="]') !== null`))
	u.step("follow the tag link", u.eval(`location.hash = document.querySelector('a[href^="#/jobs?tag="]').getAttribute("href")`),
		u.wait(`document.querySelector("#jobs, .panel p.muted") !== null && location.hash.startsWith("#/jobs")`))
	u.step("the job is listed under its own tag", u.waitFor(`document.querySelector('#jobs tr[data-id="`+j.ID+`"]') !== null`, 10*time.Second))
}

// The confirmation says how many jobs "everything the filter matches" is ("Cancel all 3 jobs
// matching the filter?"); the action must act on those, not on jobs that arrived after the
// operator counted and confirmed.
func TestBulkAllMatchingActsOnConfirmed(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	bg := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.Insert(bg, noteArgs{Text: "old"}, &pronto.InsertOpts{Queue: "bulk"}); err != nil {
			t.Fatal(err)
		}
	}
	u := newOpUI(t)
	u.step("list", chromedp.Navigate(base+"/#/jobs?queue=bulk"), u.wait(`document.querySelectorAll("#jobs tbody tr").length === 3`),
		u.eval(`window.confirm = (msg) => { window.__confirmed = msg; return true; }; true`))
	u.step("select page", chromedp.Click(chromedp.CSS(`#jobs thead input[type=checkbox]`)), u.wait(`document.querySelector("#selcount").textContent === "3 selected"`))
	u.step("select all matching", chromedp.Click(chromedp.Search(`//div[@class="bulkbar"]/button[normalize-space()="Select all matching the filter"]`)),
		u.wait(`document.querySelector("#selcount").textContent === "All 3 matching"`))
	// Two more jobs arrive in the queue while the operator reads the count.
	var fresh []string
	for i := 0; i < 2; i++ {
		j, err := c.Insert(bg, noteArgs{Text: "new"}, &pronto.InsertOpts{Queue: "bulk"})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, j.ID)
	}
	u.step("cancel, confirming 3", chromedp.Click(chromedp.Search(`//div[@class="bulkbar"]/button[normalize-space()="Cancel"]`)),
		u.wait(`window.__confirmed === "Cancel all 3 jobs matching the filter?"`),
		u.wait(`!document.getElementById("toast").hidden && document.getElementById("toast").textContent.startsWith("cancel:")`))
	toast := u.str(`document.getElementById("toast").textContent`)
	for _, id := range fresh {
		if j, err := c.JobGet(bg, id); err != nil || j.State != pronto.StateAvailable {
			t.Errorf("job %s, inserted after the operator selected the 3 matching jobs and confirmed cancelling 3, is %v (%v); want available; toast %q", id, j.State, err, toast)
		}
	}
}

// opRestart opens the overview against `pronto serve` over SQLite, restarts the server on the
// same address with env2, and returns the UI, the new base URL and a client on the same database.
func opRestart(t *testing.T, env1, env2 map[string]string, key1 string) (*opUI, string, *pronto.Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "restart.db")
	addr := freeAddr(t)
	base, stop := opServe(t, env1, addr, "--database-url", "sqlite:"+path)
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Insert(context.Background(), noteArgs{Text: "a"}, &pronto.InsertOpts{Queue: "restart"}); err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("open", chromedp.Navigate(base+"/"))
	if key1 != "" {
		u.step("log in", chromedp.WaitVisible(chromedp.ID("key")), chromedp.SendKeys(chromedp.ID("key"), key1), chromedp.Submit(chromedp.ID("key")))
	}
	u.step("overview live", u.wait(`document.querySelector('td[data-q="restart"][data-s="available"]') !== null && document.querySelector("#live.on") !== null`),
		u.eval(`window.__noReload = 1`))
	stop()
	u.step("the page notices", u.wait(`document.querySelector("#live.on") === null`))
	base2, _ := opServe(t, env2, addr, "--database-url", "sqlite:"+path)
	if base2 != base {
		t.Fatalf("restarted on %s, want %s", base2, base)
	}
	return u, base, c
}

// Without an API key, a restarted server must still accept the open page's actions once the
// page shows "live" again (or the page must reload itself); it refuses them for a CSRF token
// that only the old process knew.
func TestActionsAfterRestartWithoutKey(t *testing.T) {
	u, _, c := opRestart(t, nil, nil, "")
	u.step("live again", u.wait(`document.querySelector("#live.on") !== null`))
	// Clicked in the page: the overview's rows are drawn again on every live update, so a node id
	// chromedp found could be gone by the time it clicks (-32000).
	u.step("pause the queue after the restart", u.eval(`document.querySelector('tr[data-queue="restart"] button').click()`),
		u.wait(`document.querySelector('tr[data-queue="restart"].paused') !== null || (!document.getElementById("toast").hidden && document.getElementById("toast").classList.contains("bad"))`))
	qs, err := c.QueueList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !paused(qs, "restart") {
		t.Fatalf("after the restart, Pause on the live page left the queue running; the page says %q (reloaded: %v)",
			u.str(`document.getElementById("toast").textContent`), u.str(`String(window.__noReload !== 1)`))
	}
}

// When the restarted server has a new API key (the README: "changing the key ends them all"), the
// open page must ask for the new key, not stay on "reconnecting" with frozen numbers for good.
func TestKeyChangeWhilePageOpen(t *testing.T) {
	u, _, _ := opRestart(t, map[string]string{cli.EnvAPIKey: "k1"}, map[string]string{cli.EnvAPIKey: "k2"}, "k1")
	if err := chromedp.Do(u.ctx, u.waitFor(`document.getElementById("key") !== null`, 30*time.Second)); err != nil {
		t.Fatalf("30 s after the server came back with a new key the page still shows the dashboard, its indicator %q (no reload: %s), and no login form",
			u.str(`document.getElementById("live").textContent`), u.str(`String(window.__noReload === 1)`))
	}
}

// TestLogoutEndsOpenEventStream: logging out ends the session on the server, and an event stream
// that session opened ends too (it kept pushing queue counts to the logged-out page): the page's
// stream is refused on its retry and the page falls back to the login form.
func TestLogoutEndsOpenEventStream(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{APIKey: "k3y"})
	u := newOpUI(t)
	u.step("log in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("key")), chromedp.SendKeys(chromedp.ID("key"), "k3y"),
		chromedp.Submit(chromedp.ID("key")), u.wait(`document.querySelector("#live.on") !== null && document.querySelector("#no-queues, #queues") !== null`))
	// The session logs out (as another tab of this browser would); this page stays open.
	u.step("log out", u.eval(`fetch("/logout", {method: "POST", credentials: "same-origin"}).then(() => fetch("/api/jobs")).then((r) => { window.__after = r.status; }); true`),
		u.wait(`window.__after === 401`))
	if _, err := c.Insert(context.Background(), noteArgs{Text: "secret"}, &pronto.InsertOpts{Queue: "after-logout"}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(u.ctx, u.waitFor(`document.getElementById("key") !== null`, 30*time.Second)); err != nil {
		t.Fatalf("after logging out the page never fell back to the login form: indicator %q, queue after-logout shown: %s",
			u.str(`document.getElementById("live").textContent`), u.str(`String(document.querySelector('td[data-q="after-logout"]') !== null)`))
	}
}
