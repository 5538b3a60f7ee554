package dashboard_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// A view still loading when the operator moves on draws nothing: an overview whose answer arrives
// after the cron view opened must not append its charts and tables under the cron view, nor keep a
// live listener there.
func TestSlowViewDroppedAfterNavigation(t *testing.T) {
	st := &flakyStore{Store: memory.New()}
	base, c := st.serve(t, nil)
	if _, err := c.Insert(context.Background(), noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "stale"}); err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("jobs view", chromedp.Navigate(base+"/#/jobs"), u.wait(`document.querySelector("#jobs") !== null`))
	release := st.hold() // the overview's read answers only once released
	u.step("open the overview, then the cron view before the overview answered",
		u.eval(`location.hash = "#/"; true`),
		u.wait(`document.querySelector("main h1") !== null && document.querySelector("main h1").textContent === "Overview"`),
		u.eval(`location.hash = "#/cron"; true`),
		u.wait(`document.querySelector("main h1") !== null && document.querySelector("main h1").textContent === "Cron schedules" && document.querySelector("main .panel p.muted") !== null`))
	release()
	// The overview's answer arrives, then a few live ticks that its listener would have drawn.
	u.step("the overview's late answer and three ticks after it",
		u.wait(`performance.getEntriesByType("resource").some((e) => e.name.endsWith("/api/overview") && e.responseEnd > 0)`),
		u.eval(`window.__ticks = live.history.length; true`),
		u.wait(`live.history.length >= window.__ticks + 3`))
	h1s := u.str(`Array.from(document.querySelectorAll("main h1")).map((h) => h.textContent).join(" | ")`)
	if h1s != "Cron schedules" || u.str(`String(document.querySelector("#queues, #chart-throughput, #no-queues") === null)`) != "true" {
		t.Fatalf("on #/cron the page shows the headings %q and the overview's panels: the overview, answered late, was drawn under the cron view", h1s)
	}
	if n := u.str(`String(live.listeners.size)`); n != "0" {
		t.Fatalf("the cron view has %s live listeners: the overview, answered late, registered its own on the cron view", n)
	}
}
