package dashboard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// fitsWindow fails the test when the page is wider than the window, naming what overflows.
func (u *opUI) fitsWindow(what string) {
	u.t.Helper()
	if ok := u.str(`String(document.documentElement.scrollWidth <= document.documentElement.clientWidth)`); ok != "true" {
		wide := u.str(`Array.from(document.querySelectorAll("main *")).filter((e) => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0).map((e) => e.tagName + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "") + " " + e.scrollWidth + "px").join(", ")`)
		u.t.Fatalf("%s is %s px wide in a %s px window (overflowing: %s)",
			what, u.str(`String(document.documentElement.scrollWidth)`), u.str(`String(document.documentElement.clientWidth)`), wide)
	}
}

// User text that is one long word (a URL, a token, a base64 blob in an error; a generated workflow
// name; a long tenant id) wraps instead of widening the page.
func TestLongWordsWrap(t *testing.T) {
	long := "https://partner.example/api/v2/upload?token=" + strings.Repeat("A1b2C3d4", 80)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[noteArgs]) error {
		return errors.New("upload failed: " + long)
	}))
	st := &flakyStore{Store: memory.New()}
	base, c := st.serve(t, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 1}},
		Workers: workers, PollInterval: 50 * time.Millisecond,
	})
	bg := context.Background()
	if err := c.Start(bg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	j, err := c.Insert(bg, noteArgs{Text: "x"}, &pronto.InsertOpts{MaxAttempts: 1, Tenant: "tenant-" + strings.Repeat("x", 240)})
	if err != nil {
		t.Fatal(err)
	}
	u := newOpUI(t)
	u.step("the failed job's page", chromedp.Navigate(base+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="discarded"]') !== null && document.querySelector("#timeline li.bad") !== null`))
	u.fitsWindow("the job page of a job whose error is one long word")
	u.step("the jobs list with a long tenant", chromedp.Navigate(base+"/#/jobs?queue=default"),
		u.wait(`document.querySelector('#jobs a.tenant') !== null`))
	u.fitsWindow("the jobs list showing a 247-character tenant")
	if w := u.str(`(() => { const b = document.querySelector("#jobs").parentElement; return b.scrollWidth <= b.clientWidth ? "" : b.scrollWidth + " px in " + b.clientWidth; })()`); w != "" {
		t.Fatalf("the jobs table with a 247-character tenant scrolls sideways (%s): the tenant cell does not wrap", w)
	}

	res, err := c.WorkflowInsert(bg, pronto.NewWorkflow("nightly-export-"+strings.Repeat("q9", 150)).Add("a", noteArgs{Text: "w"}, &pronto.InsertOpts{Queue: "wf"}))
	if err != nil {
		t.Fatal(err)
	}
	u.step("the workflow page", chromedp.Navigate(base+"/#/workflow/"+res.Workflow.ID), u.wait(`document.querySelector("#wfgraph") !== null`))
	u.fitsWindow("the page of a workflow whose name is one long word")
}
