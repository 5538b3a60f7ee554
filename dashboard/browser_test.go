package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/cli"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// uiWork is the job the browser tests watch; it fails for good while failing is set.
type uiWork struct {
	N int `json:"n"`
}

func (uiWork) Kind() string { return "ui.work" }

// chromiumPath finds the browser; a missing one fails the test (CI installs the chromium package).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PRONTO_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: install it (Debian: apt-get install -y chromium) or set PRONTO_CHROMIUM to the browser's path")
	return ""
}

// screenshotDir keeps the screenshots after the test: PRONTO_SCREENSHOT_DIR, or a new temp dir.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PRONTO_SCREENSHOT_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "pronto-dashboard-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// startServe runs the real `pronto serve` in this process and returns its base URL; it stops when
// the test ends.
func startServe(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	base, _ := opServe(t, env, "127.0.0.1:0", args...)
	return base
}

// workerClient works queue "default" against the same database as the server. A job with N 50
// reports progress and waits until progressed is closed.
func workerClient(t *testing.T, st store.Store, failing *atomic.Bool, progressed <-chan struct{}) *pronto.Client {
	t.Helper()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[uiWork]) error {
		if j.Args.N == 99 {
			panic("ui.work cannot take 99")
		}
		if j.Args.N == 50 { // reports half its progress, then waits to be released
			if err := pronto.ReportProgress(ctx, 0.5, map[string]string{"step": "halfway"}); err != nil {
				return err
			}
			select {
			case <-progressed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if failing.Load() {
			return pronto.Discard(errors.New("boom: the disk is full"))
		}
		return pronto.RecordResult(ctx, map[string]int{"doubled": j.Args.N * 2})
	}))
	c, err := pronto.NewClient(st, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 4}},
		Workers: workers, PollInterval: 100 * time.Millisecond, DisableMaintenance: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func TestBrowserSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ui.db")
	base := startServe(t, map[string]string{cli.EnvAPIKey: "s3cret"}, "--database-url", "sqlite:"+path)
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	browserScenario(t, base, "s3cret", st, "sqlite")
}

func TestBrowserPostgres(t *testing.T) {
	schema := testdb.Schema(t)
	base := startServe(t, nil, "--database-url", testdb.URL(), "--schema", schema, "--pool-size", "4")
	st, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	browserScenario(t, base, "", st, "postgres")
}

func TestBrowserRedis(t *testing.T) {
	prefix := "prontoui:" + uuidv7.New() + ":"
	url := "redis://127.0.0.1:6379/0?key_prefix=" + prefix
	base := startServe(t, nil, "--database-url", url)
	st, err := redis.Open(context.Background(), url, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The keys under the test's prefix go with it (tests only: SCAN is fine here).
		ctx := context.Background()
		iter := st.Client().Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			st.Client().Del(ctx, iter.Val())
		}
		st.Close()
	})
	browserScenario(t, base, "", st, "redis")
}

// browserScenario drives the dashboard the way an operator would, waiting on what the page shows.
func browserScenario(t *testing.T, base, apiKey string, st store.Store, name string) {
	var failing atomic.Bool
	progressed := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(progressed) }) }
	defer release()
	c := workerClient(t, st, &failing, progressed)
	shots := screenshotDir(t)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			loc, _ := chromedp.Run(bctx, chromedp.Location())
			if buf, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)); err == nil {
				_ = os.WriteFile(filepath.Join(shots, name+"-FAILED.png"), buf, 0o644)
			}
			t.Fatalf("%s: %s: %v (page %s)", name, what, err, loc)
		}
	}
	shot := func(file string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg) // 100: PNG
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+"-"+file+".png"), buf, 0o644)
		})
	}
	// wait polls a JavaScript condition until it holds: the page updates itself, we never sleep.
	wait := func(cond string) chromedp.Action[chromedp.Void] {
		// Evaluated afresh each time, so a navigation in between (which drops the page's JavaScript
		// context) only costs a retry.
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			deadline := time.Now().Add(30 * time.Second)
			for {
				ok, err := chromedp.Evaluate[bool](cond)(ctx, tg)
				if err == nil && ok {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("condition %s still false after 30 s (last error: %v)", cond, err)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
	eval := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](js)(ctx, tg)
			return err
		})
	}

	// Script errors and console errors (a refused Content-Security-Policy among them) fail the test.
	var (
		jsMu   sync.Mutex
		jsErrs []string
	)
	if err := chromedp.Listen(bctx, func(ev any) {
		jsMu.Lock()
		defer jsMu.Unlock()
		switch e := ev.(type) {
		case *cdpruntime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			jsErrs = append(jsErrs, msg)
		case *cdplog.EventEntryAdded:
			// Network entries are the HTTP statuses the page expects (401 before logging in).
			if e.Entry.Level == cdplog.EntryLevelError && e.Entry.Source != cdplog.EntrySourceNetwork {
				jsErrs = append(jsErrs, string(e.Entry.Source)+": "+e.Entry.Text)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		jsMu.Lock()
		defer jsMu.Unlock()
		for _, e := range jsErrs {
			t.Errorf("%s: error in the page: %s", name, e)
		}
	}()
	step("open the dashboard", chromedp.Navigate(base+"/"))
	if apiKey != "" {
		step("log in", chromedp.WaitVisible(chromedp.ID("key")), chromedp.SendKeys(chromedp.ID("key"), apiKey),
			chromedp.Submit(chromedp.ID("key")))
	}
	step("overview", wait(`document.querySelector("#queues, #no-queues") !== null && document.querySelector("#live.on") !== null`),
		eval(`window.__noReload = 1`))
	// The clients connected to the store: the worker (4 workers on default, no maintenance) and the
	// server's own client, which leads.
	step("clients", wait(fmt.Sprintf(`(document.querySelector('#clients td[data-workers="%s"]') || {}).textContent === "4"`, c.ID())),
		wait(`document.querySelectorAll("#clients tbody tr").length === 2`),
		wait(fmt.Sprintf(`document.querySelector('#clients tr.leader') !== null && document.querySelector('#clients tr.leader').dataset.client !== "%s"`, c.ID())),
		wait(fmt.Sprintf(`(document.querySelector('#clients tr[data-client="%s"] .qchip[data-q="default"]') || {}).textContent === "default 0 / 4"`, c.ID())))

	// Jobs in a queue no one works stay available: the counts must move without a reload.
	bg := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.Insert(bg, uiWork{N: i}, &pronto.InsertOpts{Queue: "slow"}); err != nil {
			t.Fatal(err)
		}
	}
	step("live counts", wait(`(document.querySelector('td[data-q="slow"][data-s="available"]') || {}).textContent === "3" && window.__noReload === 1`))
	// Clicked in the page: the overview's rows are drawn again on every live update, so a node id
	// chromedp found could be gone by the time it clicks (-32000).
	step("pause a queue", eval(`document.querySelector('tr[data-queue="slow"] button').click()`),
		wait(`document.querySelector('tr[data-queue="slow"].paused') !== null`), shot("overview"))
	if qs, err := c.QueueList(bg); err != nil || !paused(qs, "slow") {
		t.Fatalf("%s: queue slow is not paused in the store: %v %v", name, qs, err)
	}

	// A job that fails for good shows its error; retried, it completes.
	failing.Store(true)
	j, err := c.Insert(bg, uiWork{N: 21}, &pronto.InsertOpts{MaxAttempts: 1, Tags: []string{"ui-test"}})
	if err != nil {
		t.Fatal(err)
	}
	step("open the discarded job", chromedp.Navigate(base+"/#/job/"+j.ID),
		wait(`document.querySelector('h1 .state[data-state="discarded"]') !== null`),
		wait(`(document.querySelector("#errors .errmsg") || {}).textContent === "boom: the disk is full"`), shot("job-discarded"))
	failing.Store(false)
	step("retry it", chromedp.Click(chromedp.Search(`//button[normalize-space()="Retry"]`)),
		wait(`document.querySelector('h1 .state[data-state="completed"]') !== null`),
		wait(`document.body.textContent.includes('"doubled": 42')`),
		// The timeline shows both runs: the failed attempt's start and failure, then the retry's start
		// and completion, in that order.
		wait(`Array.from(document.querySelectorAll("#timeline li.start, #timeline li.bad, #timeline li.good")).map((li) => li.className).join() === "start,bad,start,good"`),
		wait(`document.querySelector("#timeline li.bad").textContent.includes("boom: the disk is full")`),
		wait(`!Array.from(document.querySelector("#errors").parentNode.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim() === "null")`),
		shot("job-completed"))

	// A panic's stack is on the job page.
	pj, err := c.Insert(bg, uiWork{N: 99}, &pronto.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	step("a panicked job's stack", chromedp.Navigate(base+"/#/job/"+pj.ID),
		wait(`document.querySelector('h1 .state[data-state="discarded"]') !== null`),
		wait(`[...document.querySelectorAll("#errors details pre")].some((p) => p.textContent.includes("goroutine"))`))

	step("jobs list", chromedp.Navigate(base+"/#/jobs?tag=ui-test"),
		wait(`document.querySelector('#jobs tr[data-id="`+j.ID+`"]') !== null`), shot("jobs"))

	// Bulk: select the page of the paused queue's jobs and cancel them, confirming.
	step("bulk cancel", chromedp.Navigate(base+"/#/jobs?queue=slow"),
		wait(`document.querySelectorAll("#jobs tbody tr").length === 3`),
		eval(`window.confirm = (msg) => { window.__confirmed = msg; return true; }; true`))
	step("select the page", chromedp.Click(chromedp.CSS(`#jobs thead input[type=checkbox]`)),
		wait(`document.querySelector("#selcount").textContent === "3 selected"`))
	step("select everything the filter matches", chromedp.Click(chromedp.Search(`//div[@class="bulkbar"]/button[normalize-space()="Select all matching the filter"]`)),
		wait(`document.querySelector("#selcount").textContent === "All 3 matching"`))
	step("confirm", chromedp.Click(chromedp.Search(`//div[@class="bulkbar"]/button[normalize-space()="Cancel"]`)),
		wait(`window.__confirmed === "Cancel all 3 jobs matching the filter?"`),
		wait(`document.querySelectorAll('#jobs tbody .state[data-state="cancelled"]').length === 3`))

	// Time windows: the retried job finished within the last 15 minutes and was created within the
	// hour; nothing of it was created before an hour ago. The form writes the window into the address.
	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	step("jobs created before an hour ago", chromedp.Navigate(base+"/#/jobs?tag=ui-test&created_before="+hourAgo),
		wait(`document.body.textContent.includes("No jobs match.")`))
	step("jobs finished in the last 15 minutes", chromedp.Navigate(base+"/#/jobs?tag=ui-test&finished_after=15m"),
		wait(`document.querySelector('#jobs tr[data-id="`+j.ID+`"]') !== null`))
	step("the time filter in the form", chromedp.Navigate(base+"/#/jobs?tag=ui-test"),
		wait(`document.querySelector('#jobs tr[data-id="`+j.ID+`"]') !== null`),
		eval(`(() => { const f = document.querySelector('select[name="time"]'); f.value = "created"; f.dispatchEvent(new Event("change")); })()`),
		wait(`location.hash.includes("created_after=5m")`),
		wait(`document.querySelector('#jobs tr[data-id="`+j.ID+`"]') !== null && document.querySelector('select[name="since"]').value === "5m"`),
		shot("jobs-time"))

	// Progress reported by a running job shows on its page, live.
	pg, err := c.Insert(bg, uiWork{N: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	step("progress", chromedp.Navigate(base+"/#/job/"+pg.ID),
		wait(`(document.querySelector("#progress .pct") || {}).textContent === "50%"`),
		wait(`document.querySelector("#progress").textContent.includes("halfway")`), shot("job-progress"))
	release()
	step("progress done", wait(`document.querySelector('h1 .state[data-state="completed"]') !== null`))

	// A job due in an hour runs now.
	later, err := c.Insert(bg, uiWork{N: 8}, &pronto.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	step("run a scheduled job now", chromedp.Navigate(base+"/#/job/"+later.ID),
		wait(`document.querySelector('h1 .state[data-state="scheduled"]') !== null`),
		chromedp.Click(chromedp.Search(`//button[normalize-space()="Run now"]`)),
		wait(`document.querySelector('h1 .state[data-state="completed"]') !== null`),
		wait(`document.body.textContent.includes('"doubled": 16')`))

	// A workflow's graph: a → (b, c), every node completed.
	wf := pronto.NewWorkflow("ui-graph").
		Add("a", uiWork{N: 1}, nil).Add("b", uiWork{N: 2}, nil, "a").Add("c", uiWork{N: 3}, nil, "a")
	res, err := c.WorkflowInsert(bg, wf)
	if err != nil {
		t.Fatal(err)
	}
	step("workflow graph", chromedp.Navigate(base+"/#/workflow/"+res.Workflow.ID),
		wait(`document.querySelectorAll('#wfgraph .node[data-state="completed"]').length === 3 && document.querySelectorAll('#wfgraph path.edge').length === 2`),
		shot("workflow"))
	step("workflows list", chromedp.Navigate(base+"/#/workflows"),
		wait(fmt.Sprintf(`document.querySelector('#workflows a[href="#/workflow/%s"]') !== null`, res.Workflow.ID)),
		eval(`window.__noReload = 2`))
	// A new workflow appears on the open list without a reload, and its state follows its jobs.
	res2, err := c.WorkflowInsert(bg, pronto.NewChain("ui-chain", pronto.WorkflowJob{Args: uiWork{N: 4}}, pronto.WorkflowJob{Args: uiWork{N: 5}}))
	if err != nil {
		t.Fatal(err)
	}
	step("workflows list live", wait(fmt.Sprintf(`document.querySelector('#workflows tr[data-id="%s"][data-state="completed"]') !== null && window.__noReload === 2`, res2.Workflow.ID)),
		shot("workflows"))
	// A workflow failed by its callback (discarded: N 99 panics) while its one step completed says
	// so on its page and in the list, where the callback counts among the failures.
	res3, err := c.WorkflowInsert(bg, pronto.NewWorkflow("ui-callback").Add("a", uiWork{N: 6}, nil).
		OnSuccess(pronto.WorkflowJob{Args: uiWork{N: 99}, Opts: &pronto.InsertOpts{MaxAttempts: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	step("workflow failed by its callback", chromedp.Navigate(base+"/#/workflow/"+res3.Workflow.ID),
		wait(`document.querySelector('h1 .state[data-state="failed"]') !== null && document.querySelector('#wfnote[data-note="callback-failed"] a[href^="#/job/"]') !== null`),
		wait(`(document.querySelector("#wfcallbacks") || {}).textContent === "1: 1 discarded"`), shot("workflow-callback-failed"))
	step("its row in the list", chromedp.Navigate(base+"/#/workflows"),
		wait(fmt.Sprintf(`(() => { const r = document.querySelector('#workflows tr[data-id="%s"][data-state="failed"]'); return r !== null && r.querySelector('.wfnote[data-note="callback-failed"]') !== null && r.querySelector('td[data-failed="1"]') !== null; })()`, res3.Workflow.ID)), shot("workflows-callback-failed"))
	if _, err := c.CronRegister(bg, pronto.CronJob{Name: "ui-nightly", Expression: "@daily", Kind: "ui.work"}); err != nil {
		t.Fatal(err)
	}
	if err := c.RateLimitSet(bg, "ui-partner", pronto.RateLimit{MaxActive: 5, Rate: 100, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	step("dead letter", chromedp.Navigate(base+"/#/deadletter"),
		wait(`document.querySelector('#deadletter tr[data-id="`+pj.ID+`"]') !== null`), shot("deadletter"))
	step("cron", chromedp.Navigate(base+"/#/cron"), wait(`document.querySelector("#cron tbody tr .s-completed") !== null`),
		chromedp.Click(chromedp.Search(`//table[@id="cron"]//button[normalize-space()="Pause"]`)))
	// Every store pauses a schedule and resumes it.
	step("cron paused", wait(`document.querySelector("#cron tbody tr .s-cancelled") !== null`), shot("cron"))
	if cs, err := c.CronGet(bg, "ui-nightly"); err != nil || !cs.Paused {
		t.Fatalf("after Pause on the page, the schedule is %+v, %v; want paused", cs, err)
	}
	step("cron resumed", chromedp.Click(chromedp.Search(`//table[@id="cron"]//button[normalize-space()="Resume"]`)),
		wait(`document.querySelector("#cron tbody tr .s-completed") !== null`))
	if cs, err := c.CronGet(bg, "ui-nightly"); err != nil || cs.Paused {
		t.Fatalf("after Resume on the page, the schedule is %+v, %v; want enabled", cs, err)
	}
	step("rate limits", chromedp.Navigate(base+"/#/ratelimits"),
		wait(`(document.querySelector("#ratelimits tbody tr") || {}).textContent.includes("ui-partner")`), shot("ratelimits"))
	// A burst of work moves the throughput chart.
	burst := make([]pronto.InsertManyParams, 200)
	for i := range burst {
		burst[i] = pronto.InsertManyParams{Args: uiWork{N: 1000 + i}} // never 99, which panics
	}
	if _, err := c.InsertMany(bg, burst); err != nil {
		t.Fatal(err)
	}
	step("busy overview", chromedp.Navigate(base+"/#/"),
		wait(`Number((document.querySelector('td[data-q="default"][data-s="completed"]') || {}).textContent) >= 204`),
		wait(`document.querySelectorAll("#chart-throughput polyline").length === 2`), shot("overview-busy"))
	step("phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/#/"),
		wait(`document.querySelector("#queues") !== null`), shot("overview-phone"),
		// Usable on a phone: nothing widens the page beyond the screen (wide tables scroll inside their panel).
		wait(`document.documentElement.scrollWidth <= document.documentElement.clientWidth`),
		wait(`getComputedStyle(document.body).backgroundColor === "rgb(247, 248, 250)"`)) // light by default
	// Dark follows the system setting.
	if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
	}); err != nil {
		t.Fatal(err)
	}
	step("dark", chromedp.EmulateViewport(1280, 900),
		wait(`getComputedStyle(document.body).backgroundColor === "rgb(15, 18, 22)"`), shot("overview-dark"))
}

func paused(qs []pronto.QueueInfo, name string) bool {
	for _, q := range qs {
		if q.Name == name {
			return q.Paused
		}
	}
	return false
}
