package dashboard_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/memory"
)

// An open page of a finished job follows a retry made by another process on the same store (the
// CLI, another server, a Go service), which no event of the dashboard's own client names: the
// queue counts the server pushes move, and the page reads the job again. It used to keep showing
// the job cancelled, with a Retry button that would now answer 409.
func TestJobPageFollowsRetryElsewhere(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	bg := context.Background()
	j, err := c.Insert(bg, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.JobCancel(bg, j.ID); err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("the cancelled job's page, live", chromedp.Navigate(base+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="cancelled"]') !== null && document.querySelector("#live.on") !== null`))
	other, err := pronto.NewClient(c.Store(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.JobRetry(bg, j.ID); err != nil {
		t.Fatal(err)
	}
	// A bound on the wait, not a timing assertion: the hub ticks every 200 ms, the page re-reads
	// a finished job at most every 2 s.
	if err := chromedp.Do(u.ctx, u.waitFor(`document.querySelector('h1 .state[data-state="available"]') !== null`, 10*time.Second)); err != nil {
		t.Fatalf("another client retried the job (now available), but its open page still shows %q: %v",
			u.str(`document.querySelector("h1 .state").textContent`), err)
	}
	if got := u.str(`[...document.querySelectorAll(".actions button")].map((b) => b.textContent).join(",")`); got != "Cancel,Delete" {
		t.Fatalf("the retried job's actions are %q, want Cancel,Delete", got)
	}
}

// An open page of a job deleted elsewhere says the job no longer exists, without its state or
// actions, rather than keep showing it "available" under "live" (every re-read answered 404,
// which the page dropped).
func TestJobPageSaysDeletedJobIsGone(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	bg := context.Background()
	j, err := c.Insert(bg, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("the job's page, live", chromedp.Navigate(base+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="available"]') !== null && document.querySelector("#live.on") !== null`))
	other, err := pronto.NewClient(c.Store(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.JobDelete(bg, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(u.ctx, u.waitFor(`document.getElementById("gone") !== null`, 10*time.Second)); err != nil {
		t.Fatalf("the job was deleted (GET /api/jobs/{id} answers 404), but its open page still shows it as %q: %v",
			u.str(`document.querySelector("h1 .state") ? document.querySelector("h1 .state").textContent : ""`), err)
	}
	if got := u.str(`document.querySelector("main").innerText`); !containsAll(got, "no longer exists", j.ID) {
		t.Fatalf("the deleted job's page reads %q", got)
	}
	if n := u.str(`String(document.querySelectorAll("main h1 .state, main .actions button").length)`); n != "0" {
		t.Fatalf("the deleted job's page still shows %s state tags or action buttons", n)
	}
}

// When re-reading an open job fails for another reason than its deletion (here the store refuses
// job reads while the queue counts still come), the page keeps the job as last read and says it is
// not live; the next good read clears that. Such failures used to be dropped unseen.
func TestJobPageMarksFailedReRead(t *testing.T) {
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
	j, err := c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("the job's page, live", chromedp.Navigate(srv.URL+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="available"]') !== null && document.querySelector("#live.on") !== null`))
	if got := u.str(`document.getElementById("stale").hidden ? "hidden" : "shown"`); got != "hidden" {
		t.Fatalf("the stale marker is %s before any read failed", got)
	}
	st.down.Store(true)
	u.step("a failed re-read is marked", u.wait(`!document.getElementById("stale").hidden`))
	if got := u.str(`document.getElementById("stale").textContent`); !containsAll(got, "Not live", "store unreachable") {
		t.Fatalf("the stale marker reads %q", got)
	}
	if got := u.str(`document.querySelector("h1 .state").dataset.state`); got != "available" {
		t.Fatalf("after a failed re-read the page shows the job %q, want it as last read (available)", got)
	}
	st.down.Store(false)
	u.step("the next good read clears the marker", u.wait(`document.getElementById("stale").hidden`))
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
