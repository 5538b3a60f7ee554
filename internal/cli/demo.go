package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// The demo's job kinds. Each has a few realistic args and a field or two that script its behaviour:
// FailTimes makes the first attempts fail (FailTimes >= the attempts allowed: the job is discarded).

type demoEmail struct {
	To        string `json:"to"`
	Template  string `json:"template"`
	FailTimes int    `json:"fail_times,omitempty"`
}

func (demoEmail) Kind() string { return "email.send" }

type demoImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
	// Corrupt makes the first attempt panic, to show that a panic fails one attempt, not the process.
	Corrupt bool `json:"corrupt,omitempty"`
}

func (demoImage) Kind() string { return "image.resize" }

type demoReport struct {
	Account string `json:"account"`
	Period  string `json:"period"`
	// WaitForUpstream makes the first attempt snooze: the job goes back to scheduled without using
	// an attempt.
	WaitForUpstream bool `json:"wait_for_upstream,omitempty"`
}

func (demoReport) Kind() string { return "report.build" }

type demoWebhook struct {
	URL       string `json:"url"`
	Event     string `json:"event"`
	FailTimes int    `json:"fail_times,omitempty"`
}

func (demoWebhook) Kind() string { return "webhook.deliver" }

// demoQueue is one queue of the demo: its name, base worker count, and the kind it carries.
type demoQueue struct {
	name    string
	workers int
	kind    string
}

var demoQueues = []demoQueue{
	{"email", 10, "email.send"},
	{"media", 4, "image.resize"},
	{"reports", 2, "report.build"},
	{"webhooks", 8, "webhook.deliver"},
}

// demoKinds in display order.
var demoKinds = []string{"email.send", "image.resize", "report.build", "webhook.deliver"}

// demoAttempts is the demo's retry budget: three attempts, retried after about 200 ms then 400 ms.
const demoAttempts = 3

// demoPlan is the jobs a demo inserts, in insertion waves, and the outcome it expects.
type demoPlan struct {
	waves [][]pronto.InsertManyParams
	// gap separates the waves: 350 ms for the default 300 jobs, less for small demos.
	gap   time.Duration
	total int
	// expectDiscarded counts the jobs scripted to fail every attempt; every other job completes.
	expectDiscarded int
	flaky           int // jobs that fail once, then succeed
	scheduled       int // jobs inserted to run a few seconds later
	// ids maps every job's id, chosen before insertion so that events of a job that finishes before
	// its insert returns are recognized, to its kind.
	ids map[string]string
	// before is an id made just before the jobs' ids: UUIDv7s made by one process increase, so
	// listing jobs after it finds every demo job.
	before string
}

// sleepRand sleeps a uniformly random time in [lo, hi), or until ctx ends.
func sleepRand(ctx context.Context, lo, hi time.Duration) error {
	d := lo + rand.N(hi-lo)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// demoWorkers registers the demo's workers: small realistic sleeps, scripted failures.
func demoWorkers() *pronto.Workers {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[demoEmail]) error {
		if err := sleepRand(ctx, 20*time.Millisecond, 80*time.Millisecond); err != nil {
			return err
		}
		if j.Attempt <= j.Args.FailTimes {
			return fmt.Errorf("smtp: 421 4.7.0 mx.example.com: too many connections, try again later (sending %q to %s)",
				j.Args.Template, j.Args.To)
		}
		return nil
	}))
	// The scripted panic and snooze happen at a job's first run here, not at its Attempt 1: a job
	// claimed ahead of a free worker and given back unstarted keeps its count (a refund), so its
	// first run can be Attempt 2.
	var ran sync.Map
	firstRun := func(id string) bool { _, again := ran.LoadOrStore(id, true); return !again }
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[demoImage]) error {
		if err := sleepRand(ctx, 80*time.Millisecond, 250*time.Millisecond); err != nil {
			return err
		}
		if j.Args.Corrupt && firstRun(j.ID) {
			var header []byte
			_ = header[4] // a decoder bug on a truncated upload: index out of range
		}
		return pronto.RecordResult(ctx, map[string]any{
			"url": strings.Replace(j.Args.URL, "/uploads/", fmt.Sprintf("/w%d/", j.Args.Width), 1), "width": j.Args.Width,
			"bytes": 20_000 + rand.IntN(180_000),
		})
	}))
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[demoReport]) error {
		if j.Args.WaitForUpstream && firstRun(j.ID) {
			return pronto.Snooze(time.Second) // upstream data not ready: look again in a second
		}
		if err := sleepRand(ctx, 250*time.Millisecond, 700*time.Millisecond); err != nil {
			return err
		}
		return pronto.RecordResult(ctx, map[string]any{
			"rows": 1_000 + rand.IntN(50_000),
			"url":  fmt.Sprintf("s3://reports.example.com/%s/%s.pdf", j.Args.Account, j.Args.Period),
		})
	}))
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[demoWebhook]) error {
		if err := sleepRand(ctx, 10*time.Millisecond, 60*time.Millisecond); err != nil {
			return err
		}
		if j.Attempt <= j.Args.FailTimes {
			if j.Args.FailTimes >= demoAttempts {
				return fmt.Errorf("POST %s: dial tcp 203.0.113.7:443: connect: connection refused", j.Args.URL)
			}
			return fmt.Errorf("POST %s: 503 Service Unavailable", j.Args.URL)
		}
		return nil
	}))
	return ws
}

// buildDemoPlan builds n jobs: 40% emails, 30% webhooks, 20% image resizes, 10% reports; about 3% fail
// every attempt (dead webhook endpoints), 8% fail once, 10% are scheduled 2 to 6 s out, one report
// snoozes and one image panics on its first attempt. The first 40% are inserted at once, the rest in
// twelve waves over the next 4.2 s (less for fewer than 300 jobs).
func buildDemoPlan(n int) *demoPlan {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	type spec struct {
		args pronto.JobArgs
		opts pronto.InsertOpts
	}
	var emails, webhooks, images, reports []*spec
	templates := []struct {
		name     string
		priority int
	}{{"password_reset", 10}, {"receipt", 5}, {"welcome", 0}, {"newsletter", -10}}
	events := []string{"order.paid", "order.shipped", "invoice.created", "customer.updated"}
	period := time.Now().AddDate(0, -1, 0).Format("2006-01")
	for i := range n {
		switch i % 10 {
		case 0, 1, 2, 3:
			t := templates[rng.IntN(len(templates))]
			emails = append(emails, &spec{
				args: demoEmail{To: fmt.Sprintf("user%04d@example.com", rng.IntN(10000)), Template: t.name},
				opts: pronto.InsertOpts{Queue: "email", Priority: t.priority},
			})
		case 4, 5, 6:
			webhooks = append(webhooks, &spec{
				args: demoWebhook{URL: fmt.Sprintf("https://hooks.example.com/acme-%02d/events", rng.IntN(40)), Event: events[rng.IntN(len(events))]},
				opts: pronto.InsertOpts{Queue: "webhooks"},
			})
		case 7, 8:
			images = append(images, &spec{
				args: demoImage{URL: fmt.Sprintf("https://cdn.example.com/uploads/img_%05d.jpg", rng.IntN(100000)), Width: []int{320, 640, 1280}[rng.IntN(3)]},
				opts: pronto.InsertOpts{Queue: "media"},
			})
		default:
			reports = append(reports, &spec{
				args: demoReport{Account: fmt.Sprintf("acme-%02d", rng.IntN(40)), Period: period},
				opts: pronto.InsertOpts{Queue: "reports", Priority: -5},
			})
		}
	}
	p := &demoPlan{total: n, ids: make(map[string]string, n), before: uuidv7.New()}
	// Scripted behaviour. n >= 10, so every kind has at least one job.
	p.expectDiscarded = max(1, n*3/100)
	for _, s := range webhooks[:p.expectDiscarded] {
		a := s.args.(demoWebhook)
		a.URL, a.FailTimes = "https://hooks.dead-endpoint.example/v1/events", 99
		s.args = a
	}
	p.flaky = max(1, n*8/100)
	for i, e, w := 0, 0, len(webhooks)-1; i < p.flaky; i++ {
		if i%2 == 0 && e < len(emails) {
			a := emails[e].args.(demoEmail)
			a.FailTimes = 1
			emails[e].args = a
			e++
		} else if w >= p.expectDiscarded {
			a := webhooks[w].args.(demoWebhook)
			a.FailTimes = 1
			webhooks[w].args = a
			w--
		} else {
			p.flaky = i
			break
		}
	}
	img := images[0].args.(demoImage)
	img.Corrupt = true
	images[0].args = img
	rep := reports[0].args.(demoReport)
	rep.WaitForUpstream = true
	reports[0].args = rep

	all := append(append(append(emails, webhooks...), images...), reports...)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	p.scheduled = n / 10
	for _, s := range all[:p.scheduled] {
		s.opts.Delay = 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })

	first := n * 4 / 10
	wave := func(ss []*spec) []pronto.InsertManyParams {
		out := make([]pronto.InsertManyParams, len(ss))
		for i, s := range ss {
			opts := s.opts
			opts.ID = uuidv7.New()
			p.ids[opts.ID] = s.args.Kind()
			out[i] = pronto.InsertManyParams{Args: s.args, Opts: &opts}
		}
		return out
	}
	p.waves = append(p.waves, wave(all[:first]))
	rest := all[first:]
	const waves = 12
	p.gap = min(350*time.Millisecond, time.Duration(n)*350*time.Millisecond/300)
	for i := range waves {
		lo, hi := len(rest)*i/waves, len(rest)*(i+1)/waves
		if hi > lo {
			p.waves = append(p.waves, wave(rest[lo:hi]))
		}
	}
	return p
}

// demoStats is what the demo learns from its client's events, for its own jobs.
type demoStats struct {
	mu        sync.Mutex
	ids       map[string]string // id -> kind of every job of the demo; read-only
	finished  map[string]bool
	completed int
	discarded int
	failed    int // failed attempts that will be retried
	panics    int
	snoozes   int
	lost      int                      // runs whose lease ran out and that the rescuer requeued or discarded
	runTime   map[string]time.Duration // per kind, of attempts that ended
	runs      map[string]int
	lastDone  time.Time
	doneCh    chan struct{}
	closed    bool
}

func newDemoStats(ids map[string]string) *demoStats {
	return &demoStats{ids: ids, finished: map[string]bool{}, runTime: map[string]time.Duration{},
		runs: map[string]int{}, doneCh: make(chan struct{})}
}

// consume tallies events until the channel closes; total is the number of jobs the demo will insert.
func (s *demoStats) consume(events <-chan *pronto.Event, total int) {
	for e := range events {
		s.mu.Lock()
		if _, ours := s.ids[e.Job.ID]; !ours {
			s.mu.Unlock()
			continue
		}
		if e.Duration > 0 {
			s.runTime[e.Job.Kind] += e.Duration
			s.runs[e.Job.Kind]++
		}
		var pe *pronto.PanicError
		if errors.As(e.Err, &pe) {
			s.panics++
		}
		switch e.Kind {
		case pronto.EventCompleted, pronto.EventDiscarded, pronto.EventCancelled:
			if !s.finished[e.Job.ID] {
				s.finished[e.Job.ID] = true
				switch e.Kind {
				case pronto.EventCompleted:
					s.completed++
				case pronto.EventDiscarded:
					s.discarded++
				}
				s.lastDone = e.At
			}
		case pronto.EventFailed:
			s.failed++
		case pronto.EventSnoozed:
			s.snoozes++
		case pronto.EventRescued:
			s.lost++
		}
		if e.Kind == pronto.EventDiscarded && errors.Is(e.Err, pronto.ErrJobLost) {
			s.lost++
		}
		if len(s.finished) == total && !s.closed {
			s.closed = true
			close(s.doneCh)
		}
		s.mu.Unlock()
	}
}

// snapshot returns the counts the progress display shows.
func (s *demoStats) snapshot() (finished, completed, discarded, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.finished), s.completed, s.discarded, s.failed
}

// demoSummary is the demo's result, printed as text or with --json.
type demoSummary struct {
	Database       string                     `json:"database"`
	Jobs           int                        `json:"jobs"`
	Inserted       int                        `json:"inserted"` // of Jobs; fewer when interrupted
	Finished       bool                       `json:"finished"`
	Done           int                        `json:"done"` // jobs completed or discarded
	ElapsedSeconds float64                    `json:"elapsed_seconds"`
	JobsPerSecond  float64                    `json:"jobs_per_second"` // Done / ElapsedSeconds
	States         map[pronto.State]int       `json:"states"`
	Kinds          map[string]*demoKindResult `json:"kinds"`
	Attempts       int                        `json:"attempts"`
	FailedAttempts int                        `json:"failed_attempts"`
	Panics         int                        `json:"panics_recovered"`
	Snoozes        int                        `json:"snoozes"`
	Scheduled      int                        `json:"scheduled"`
	// LostLeases counts runs that stalled past their lease (an overloaded machine: the heartbeat came
	// too late) and were taken back by the rescuer; each one adds an attempt nobody scripted.
	LostLeases int `json:"lost_leases"`
	// RefundedAttempts counts the attempts given back: the snooze's, and those of claims returned
	// before they started (on PostgreSQL, a job handed to a busy producer and not taken in time), each
	// of which moved a job's attempt number without a run.
	RefundedAttempts int `json:"refunded_attempts"`
}

type demoKindResult struct {
	Jobs      int     `json:"jobs"`
	Completed int     `json:"completed"`
	Discarded int     `json:"discarded"`
	Other     int     `json:"other"`
	Attempts  int     `json:"attempts"`
	AvgRunMS  float64 `json:"avg_run_ms"`
	// results of a sample job, for the text summary
	sampleID string
}

func cmdDemo(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto demo [--jobs N] [--duration D] [flags]",
		"Insert a realistic mix of jobs (emails, image resizes, reports, webhooks) across four queues\n"+
			"with different worker counts and priorities, and work them in this process while showing\n"+
			"live progress. Some jobs are scheduled a few seconds out, some fail once and succeed on retry,\n"+
			"a few fail every attempt and are discarded, one snoozes and one panics on its first attempt.\n\n"+
			"By default every run gets a fresh SQLite file of its own in a new directory under the temporary\n"+
			"directory (kept afterwards, for the commands the summary suggests); it ignores $"+EnvDatabaseURL+".\n"+
			"With --database-url it runs on that database (migrating it if needed) and deletes nothing.\n\n"+
			"On a terminal the progress is redrawn in place, in colour unless NO_COLOR is set; otherwise it is\n"+
			"one plain line a second.").withDatabase()
	fs.Lookup("database-url").Usage = "run the demo on the database at `URL` instead of a fresh SQLite file of its own"
	n := fs.Int("jobs", 300, "insert `N` jobs (10 to 100000)")
	limit := fs.duration("duration", time.Minute, "give up after `DURATION` if jobs are still unfinished")
	asJSON := fs.Bool("json", false, "print only a JSON summary (no live progress)")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if *n < 10 || *n > 100000 {
		return usageErrorf("demo: --jobs %d: must be between 10 and 100000", *n)
	}
	if *limit <= 0 {
		return usageErrorf("demo: --duration must be positive")
	}
	out := r.env.Stdout
	if *asJSON {
		out = io.Discard
	}

	// The database: the demo's own fresh file unless one is named on the command line.
	var (
		t       *target
		inspect string // database flags for the follow-up commands
		err     error
	)
	if r.dbURLSet {
		if t, err = r.parseTarget(r.dbURL); err != nil {
			return err
		}
	} else {
		// A new directory per run: two demos at once never share (or delete) each other's file.
		dir, err := os.MkdirTemp("", "pronto-demo-")
		if err != nil {
			return errorf("demo: cannot create its database directory: %v", err)
		}
		path := filepath.Join(dir, "demo.db")
		t = &target{kind: kindSQLite, display: "sqlite:" + path, path: path}
		inspect = " --database-url " + shellQuote(t.display)
		if r.env.getenv(EnvDatabaseURL) != "" {
			fmt.Fprintf(r.env.Stderr, "note: the demo ignores $%s; pass --database-url to run it there\n", EnvDatabaseURL)
		}
	}
	db, err := r.openTarget(ctx, t, openOptions{migrate: true, create: true, maxConns: 16, checkListen: true})
	if err != nil {
		return err
	}
	defer db.Close()
	if inspect == "" {
		inspect = db.urlFlag()
	}

	scale := max(1, *n/300)
	queues := make(map[string]pronto.QueueConfig, len(demoQueues))
	workersTotal := 0
	for _, q := range demoQueues {
		queues[q.name] = pronto.QueueConfig{MaxWorkers: q.workers * scale}
		workersTotal += q.workers * scale
	}
	client, err := pronto.NewClient(db.store, &pronto.Config{
		Queues:  queues,
		Workers: demoWorkers(),
		RetryPolicy: pronto.RetryPolicy{
			MaxAttempts: demoAttempts, InitialInterval: 200 * time.Millisecond, MaxInterval: 2 * time.Second,
		},
	})
	if err != nil {
		return errorf("demo: %v", err)
	}
	// A paused queue's jobs never run: the demo would wait out --duration for nothing.
	if paused, err := pausedDemoQueues(ctx, client); err != nil {
		return errorf("demo: listing the queues of %s: %v", t.display, err)
	} else if len(paused) > 0 {
		return errorf("demo: %s in %s, so the demo's jobs there would never run; resume with: %s, or run the demo on another database",
			pausedText(paused), t.display, resumeCommands(paused, inspect))
	}
	plan := buildDemoPlan(*n)
	stats := newDemoStats(plan.ids)
	events, unsubscribe := client.Subscribe()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		stats.consume(events, plan.total)
	}()

	where := t.display
	switch {
	case !r.dbURLSet:
		where = "SQLite file " + t.path + " (new for this run)"
	case t.kind == kindMemory:
		where = "the in-memory store (gone when the demo exits)"
	}
	fmt.Fprintf(out, "pronto demo: %d jobs of 4 kinds across 4 queues (%d workers)\n", plan.total, workersTotal)
	fmt.Fprintf(out, "Database: %s\n", where)
	fmt.Fprintf(out, "%d fail once then succeed on retry, %d fail every attempt (%d attempts, retried after ~200 ms, ~400 ms),\n",
		plan.flaky, plan.expectDiscarded, demoAttempts)
	fmt.Fprintf(out, "%d are scheduled 2-6 s ahead, 1 snoozes, 1 panics on its first attempt.\n\n", plan.scheduled)

	start := time.Now()
	if err := client.Start(ctx); err != nil {
		unsubscribe()
		return errorf("demo: starting the client: %v", err)
	}
	// Insert the waves: the first at once, the others plan.gap apart.
	// Inserting stops with the demo (done, out of time or interrupted), before the summary counts the
	// jobs: the summary counts what was inserted.
	insertCtx, stopInserting := context.WithCancel(ctx)
	defer stopInserting()
	insertErr := make(chan error, 1)
	go func() {
		for i, w := range plan.waves {
			if i > 0 {
				select {
				case <-insertCtx.Done():
					insertErr <- nil
					return
				case <-time.After(plan.gap):
				}
			}
			if _, err := client.InsertMany(insertCtx, w); err != nil {
				if insertCtx.Err() != nil {
					err = nil // stopped on purpose
				}
				insertErr <- err
				return
			}
		}
		insertErr <- nil
	}()

	color := r.env.palette()
	if *asJSON {
		color = palette{}
	}
	prog := &demoProgress{r: r, out: out, client: client, stats: stats, plan: plan, start: start,
		terminal: r.env.terminal() && !*asJSON, color: color, queues: queues}
	stopProgress := prog.run()

	var outcome error
	deadline := time.NewTimer(*limit)
	defer deadline.Stop()
wait:
	for {
		select {
		case <-stats.doneCh:
			break wait
		case err := <-insertErr:
			insertErr = nil // inserting is over; a nil channel blocks
			if err != nil {
				outcome = errorf("demo: inserting jobs: %v", err)
				break wait
			}
		case <-deadline.C:
			// Paused while the demo ran (by another process): name the cause.
			if paused, err := pausedDemoQueues(ctx, client); err == nil && len(paused) > 0 {
				outcome = errorf("demo: jobs still unfinished after --duration %s: %s (resume with: %s)",
					*limit, pausedText(paused), resumeCommands(paused, inspect))
			} else {
				outcome = errorf("demo: jobs still unfinished after --duration %s", *limit)
			}
			break wait
		case <-ctx.Done():
			outcome = errorf("demo: interrupted")
			break wait
		}
	}
	elapsed := time.Since(start)
	stopInserting()
	if insertErr != nil {
		<-insertErr
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := client.Stop(stopCtx); err != nil && outcome == nil {
		outcome = errorf("demo: stopping the client: %v", err)
	}
	cancel()
	stopProgress()
	unsubscribe()
	<-consumed

	sum, err := summarize(context.WithoutCancel(ctx), client, stats, plan, start, elapsed, t.display)
	if err != nil {
		return errorf("demo: summarizing: %v", err)
	}
	sum.Finished = outcome == nil
	if *asJSON {
		if err := writeJSON(r.env.Stdout, sum); err != nil {
			return err
		}
	} else {
		printDemoSummary(out, sum, inspect, t.kind == kindMemory, color)
	}
	if outcome == nil && (sum.States[pronto.StateCompleted] != plan.total-plan.expectDiscarded ||
		sum.States[pronto.StateDiscarded] != plan.expectDiscarded) {
		outcome = errorf("demo: expected %d completed and %d discarded jobs, got %d and %d",
			plan.total-plan.expectDiscarded, plan.expectDiscarded, sum.States[pronto.StateCompleted], sum.States[pronto.StateDiscarded])
	}
	return outcome
}

// pausedDemoQueues returns the demo's queues that are paused in the database.
func pausedDemoQueues(ctx context.Context, c *pronto.Client) ([]string, error) {
	qs, err := c.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, dq := range demoQueues {
		for _, q := range qs {
			if q.Name == dq.name && q.Paused {
				out = append(out, q.Name)
			}
		}
	}
	return out, nil
}

// pausedText says which queues are paused: "queue email is paused", "queues email, media are paused".
func pausedText(qs []string) string {
	if len(qs) == 1 {
		return "queue " + qs[0] + " is paused"
	}
	return "queues " + strings.Join(qs, ", ") + " are paused"
}

// resumeCommands are the commands that resume qs.
func resumeCommands(qs []string, flags string) string {
	cmds := make([]string, len(qs))
	for i, q := range qs {
		cmds[i] = "pronto queues resume " + q + flags
	}
	return strings.Join(cmds, "; ")
}

// summarize reads the demo's jobs back from the store: the authoritative outcome.
func summarize(ctx context.Context, c *pronto.Client, stats *demoStats, plan *demoPlan, start time.Time, elapsed time.Duration, display string) (*demoSummary, error) {
	stats.mu.Lock()
	s := &demoSummary{
		Database: display, Jobs: plan.total,
		States: map[pronto.State]int{}, Kinds: map[string]*demoKindResult{},
		FailedAttempts: stats.failed, Panics: stats.panics, Snoozes: stats.snoozes, Scheduled: plan.scheduled,
		LostLeases: stats.lost,
	}
	for _, k := range demoKinds {
		kr := &demoKindResult{}
		if runs := stats.runs[k]; runs > 0 {
			kr.AvgRunMS = float64(stats.runTime[k].Microseconds()) / 1000 / float64(runs)
		}
		s.Kinds[k] = kr
	}
	lastDone := stats.lastDone
	stats.mu.Unlock()
	// List the demo's queues from just before the demo's first id, keeping only the demo's jobs
	// (another process may share the database).
	queues := make([]string, len(demoQueues))
	for i, q := range demoQueues {
		queues[i] = q.name
	}
	for cursor := plan.before; ; {
		res, err := c.JobList(ctx, &pronto.JobListParams{Queues: queues, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, j := range res.Jobs {
			if _, ok := plan.ids[j.ID]; !ok {
				continue
			}
			s.States[j.State]++
			kr := s.Kinds[j.Kind]
			kr.Jobs++
			kr.Attempts += j.Attempt
			s.Attempts += j.Attempt
			s.RefundedAttempts += j.MaxAttempts - demoAttempts
			switch j.State {
			case pronto.StateCompleted:
				kr.Completed++
			case pronto.StateDiscarded:
				kr.Discarded++
				if kr.sampleID == "" {
					kr.sampleID = j.ID
				}
			default:
				kr.Other++
			}
		}
		if res.Next == "" {
			break
		}
		cursor = res.Next
	}
	for _, n := range s.States {
		s.Inserted += n
	}
	s.Done = s.States[pronto.StateCompleted] + s.States[pronto.StateDiscarded]
	// The time the jobs took, not the shutdown after: up to the last job finished when every job did.
	span := elapsed
	if s.Done == plan.total && !lastDone.IsZero() {
		span = min(elapsed, lastDone.Sub(start))
	}
	// One duration for both: the rate printed is the average over the time printed.
	s.ElapsedSeconds = span.Seconds()
	if s.Done > 0 && span > 0 {
		s.JobsPerSecond = float64(s.Done) / s.ElapsedSeconds
	}
	return s, nil
}

// printDemoSummary writes the demo's closing report and the commands to inspect its jobs.
func printDemoSummary(w io.Writer, s *demoSummary, inspect string, memory bool, color palette) {
	fmt.Fprintf(w, "\n")
	switch {
	case s.Finished:
		fmt.Fprintf(w, "%s %d jobs in %.1fs, %.0f jobs/s on average.\n", color.green(color.bold("Done:")), s.Jobs,
			s.ElapsedSeconds, s.JobsPerSecond)
	case s.Inserted < s.Jobs:
		// Interrupted while inserting: count against what was inserted, and say what was not.
		fmt.Fprintf(w, "%s after %.1fs: %d of the %d jobs inserted finished (%.0f jobs/s); %d of the %d planned were never inserted.\n",
			color.yellow(color.bold("Stopped")), s.ElapsedSeconds, s.Done, s.Inserted, s.JobsPerSecond, s.Jobs-s.Inserted, s.Jobs)
	default:
		fmt.Fprintf(w, "%s after %.1fs: %d of %d jobs finished (%.0f jobs/s).\n", color.yellow(color.bold("Stopped")),
			s.ElapsedSeconds, s.Done, s.Jobs, s.JobsPerSecond)
	}
	var states []string
	for _, st := range store.AllStates {
		if c := s.States[st]; c > 0 {
			states = append(states, color.state(st, fmt.Sprintf("%d %s", c, st), int64(c)))
		}
	}
	fmt.Fprintf(w, "Totals: %s.\n", strings.Join(states, ", "))
	fmt.Fprintf(w, "Attempts: %d for %d jobs: %d failed and were retried, %d panic recovered, %d snoozed.\n\n",
		s.Attempts, s.Jobs, s.FailedAttempts, s.Panics, s.Snoozes)
	if s.LostLeases > 0 {
		fmt.Fprintf(w, "%d runs stalled past their lease (is the machine overloaded?) and the rescuer ran them again.\n\n", s.LostLeases)
	}
	// The table is aligned first, then coloured a whole line at a time (escape codes would count as
	// width in the tabwriter).
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tJOBS\tCOMPLETED\tDISCARDED\tATTEMPTS\tAVG RUN")
	kinds := make([]string, 0, len(s.Kinds))
	for k := range s.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	sample := ""
	for _, k := range kinds {
		kr := s.Kinds[k]
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%.0fms\n", k, kr.Jobs, kr.Completed, kr.Discarded, kr.Attempts, kr.AvgRunMS)
		if sample == "" {
			sample = kr.sampleID
		}
	}
	_ = tw.Flush()
	for i, line := range strings.SplitAfter(table.String(), "\n") {
		if i == 0 {
			line = color.bold(strings.TrimSuffix(line, "\n")) + "\n"
		}
		fmt.Fprint(w, line)
	}
	if memory {
		fmt.Fprintln(w, "\nThe in-memory store is gone now; run the demo on SQLite or PostgreSQL to inspect its jobs.")
		return
	}
	if s.States[pronto.StateDiscarded] > 0 {
		fmt.Fprintf(w, "\nThe discarded jobs failed all %d attempts on purpose. Inspect them:\n", demoAttempts)
		fmt.Fprintf(w, "  %s\n", color.cyan("pronto jobs list --state discarded"+inspect))
	} else {
		// None was discarded (the demo stopped before, or is small): nothing failed on purpose yet.
		fmt.Fprintln(w, "\nInspect the jobs:")
		fmt.Fprintf(w, "  %s\n", color.cyan("pronto jobs list"+inspect))
	}
	if sample != "" {
		fmt.Fprintf(w, "  %s\n", color.cyan("pronto jobs get "+sample+inspect))
	}
	fmt.Fprintf(w, "  %s\n", color.cyan("pronto queues list"+inspect))
	fmt.Fprintf(w, "Or watch them in the web dashboard at http://%s/:\n", DefaultServeAddr)
	fmt.Fprintf(w, "  %s\n", color.cyan("pronto serve"+inspect))
	fmt.Fprintln(w, "(No pronto command yet? From this clone: go install ./cmd/pronto, or make install;")
	fmt.Fprintln(w, " elsewhere: go install github.com/pronto-jobs/pronto/cmd/pronto@latest.)")
}
