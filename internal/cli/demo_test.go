package cli

import (
	"context"
	"database/sql"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// expectedDemo is what buildDemoPlan promises for n jobs.
func expectedDemo(n int) (discarded, flaky int) {
	return max(1, n*3/100), max(1, n*8/100)
}

// checkDemoSummary asserts that a demo's JSON summary is consistent with what it inserted: every job
// accounted for, the scripted failures discarded and everything else completed, and the attempts
// adding up.
func checkDemoSummary(t *testing.T, s *demoSummary, n int) {
	t.Helper()
	discarded, flaky := expectedDemo(n)
	if !s.Finished || s.Jobs != n {
		t.Fatalf("demo did not finish its %d jobs: %+v", n, s)
	}
	if s.States[pronto.StateCompleted] != n-discarded || s.States[pronto.StateDiscarded] != discarded || len(s.States) != 2 {
		t.Fatalf("states %v, want %d completed and %d discarded", s.States, n-discarded, discarded)
	}
	jobs, completed, disc, attempts := 0, 0, 0, 0
	for kind, k := range s.Kinds {
		jobs += k.Jobs
		completed += k.Completed
		disc += k.Discarded
		attempts += k.Attempts
		if k.Jobs == 0 || k.Other != 0 {
			t.Errorf("kind %s: %+v", kind, k)
		}
	}
	if jobs != n || completed != n-discarded || disc != discarded || attempts != s.Attempts {
		t.Fatalf("per-kind totals do not add up: %d jobs, %d completed, %d discarded, %d attempts: %+v", jobs, completed, disc, attempts, s)
	}
	if got := s.Kinds["webhook.deliver"].Discarded; got != discarded {
		t.Errorf("the dead webhooks should be the discarded jobs: %d", got)
	}
	// One attempt per job, plus one per flaky job, two more per discarded job (three attempts in all),
	// one for the panicking image and one for the snoozed report (a snooze refunds the attempt but the
	// counter still moves). Failed-and-retried attempts: the flaky ones, the first two of each
	// discarded job, the panic.
	wantAttempts, wantFailed := n+flaky+2*discarded+2, flaky+2*discarded+1
	// A claim returned before it started (a hand-off not taken in time on a loaded machine) gives its
	// attempt back and the job's next claim takes a new attempt number: beyond the snooze's one,
	// each refund is one more attempt.
	wantAttempts += max(0, s.RefundedAttempts-1)
	if lost := s.LostLeases; lost > 0 {
		// A run that stalls past its lease on a loaded machine is taken back and run again (that is
		// the fencing guarantee at work): each such run adds an attempt at most, or turns a scripted failure
		// that was never recorded into one fewer failed attempt, or (a panic or snooze lost) one
		// fewer of those. Every job is still accounted for above; here the counts move by at most
		// one per lost run.
		t.Logf("%d runs lost their lease (machine overloaded); counts allow for them", lost)
		if s.Attempts < wantAttempts || s.Attempts > wantAttempts+lost {
			t.Errorf("attempts = %d, want %d plus at most %d lost leases", s.Attempts, wantAttempts, lost)
		}
		if s.FailedAttempts < wantFailed-lost || s.FailedAttempts > wantFailed {
			t.Errorf("failed attempts = %d, want %d less at most %d lost leases", s.FailedAttempts, wantFailed, lost)
		}
		if s.Panics > 1 || s.Snoozes > 1 || s.Panics+s.Snoozes < 2-lost || s.Scheduled != n/10 {
			t.Errorf("panics %d, snoozes %d, scheduled %d", s.Panics, s.Snoozes, s.Scheduled)
		}
	} else {
		if s.Attempts != wantAttempts {
			t.Errorf("attempts = %d, want %d", s.Attempts, wantAttempts)
		}
		if s.FailedAttempts != wantFailed {
			t.Errorf("failed attempts = %d, want %d", s.FailedAttempts, wantFailed)
		}
		if s.Panics != 1 || s.Snoozes != 1 || s.Scheduled != n/10 {
			t.Errorf("panics %d, snoozes %d, scheduled %d", s.Panics, s.Snoozes, s.Scheduled)
		}
	}
	if s.ElapsedSeconds <= 0 || s.JobsPerSecond <= 0 || s.Inserted != n || s.Done != n {
		t.Errorf("elapsed %.1fs, %.1f jobs/s, %d inserted, %d done", s.ElapsedSeconds, s.JobsPerSecond, s.Inserted, s.Done)
	}
	// The rate is the average over the time reported.
	if got := s.JobsPerSecond * s.ElapsedSeconds; got < float64(n)-1e-6 || got > float64(n)+1e-6 {
		t.Errorf("%.3f jobs/s × %.3fs = %.3f, want %d", s.JobsPerSecond, s.ElapsedSeconds, got, n)
	}
}

func TestDemoJSONOnEveryStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.setup(t)
			res := run(t, with(db, "demo", "--jobs", "40", "--json")...).ok(t)
			var s demoSummary
			res.decode(t, &s)
			checkDemoSummary(t, &s, 40)
			if b.name == "memory" {
				return
			}
			// The jobs are in the database for the follow-up commands the summary suggests.
			var l jobList
			run(t, with(db, "jobs", "list", "--state", "discarded", "--json")...).ok(t).decode(t, &l)
			if len(l.Jobs) != 1 {
				t.Fatalf("jobs list --state discarded: %d jobs", len(l.Jobs))
			}
			j := l.Jobs[0]
			if j.Kind != "webhook.deliver" || j.Attempt != 3 || len(j.Errors) != 3 {
				t.Fatalf("discarded job: %+v", j)
			}
			// Its last error is the dead endpoint's, unless its last run stalled past its lease.
			if last := j.Errors[2].Message; !strings.Contains(last, "connection refused") &&
				(s.LostLeases == 0 || !strings.Contains(last, "lease")) {
				t.Fatalf("discarded job's last error: %q", last)
			}
			var qs queueList
			run(t, with(db, "queues", "list", "--json")...).ok(t).decode(t, &qs)
			if len(qs.Queues) != 4 {
				t.Fatalf("the demo uses four queues: %+v", qs)
			}
		})
	}
}

// TestDemoDefaultDatabase runs the demo as the README does, twice: each run gets a new SQLite file of
// its own in the temporary directory, and ignores PRONTO_DATABASE_URL.
func TestDemoDefaultDatabase(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	env := map[string]string{EnvDatabaseURL: "mysql://ignored"}
	where := regexp.MustCompile(`Database: SQLite file (` + regexp.QuoteMeta(tmp) + `/pronto-demo-[0-9]+/demo\.db) \(new for this run\)`)
	paths := map[string]bool{}
	for i := range 2 {
		res := runWith(t, runOpts{env: env}, "demo", "--jobs", "30").ok(t)
		m := where.FindStringSubmatch(res.stdout)
		if m == nil {
			t.Fatalf("run %d does not say where its database is:\n%s", i, res)
		}
		path := m[1]
		if paths[path] {
			t.Fatalf("run %d reused the database file %s", i, path)
		}
		paths[path] = true
		if !strings.Contains(res.stderr, "the demo ignores $"+EnvDatabaseURL) {
			t.Fatalf("run %d does not say it ignores the environment:\n%s", i, res)
		}
		// Plain output (not a terminal): no escape codes, a line a second, then the summary.
		if strings.Contains(res.stdout, "\x1b[") || !regexp.MustCompile(`(?m)^\s+\d+\.\ds  finished \d+/30 `).MatchString(res.stdout) {
			t.Fatalf("run %d: plain progress lines expected:\n%s", i, res)
		}
		discarded, _ := expectedDemo(30)
		if !regexp.MustCompile(`Done: 30 jobs in \d+\.\ds, \d+ jobs/s on average\.`).MatchString(res.stdout) ||
			!strings.Contains(res.stdout, "Totals: "+strconv.Itoa(30-discarded)+" completed, "+strconv.Itoa(discarded)+" discarded.") {
			t.Fatalf("run %d summary:\n%s", i, res)
		}
		for _, want := range []string{
			"pronto jobs list --state discarded --database-url sqlite:" + path,
			"pronto queues list --database-url sqlite:" + path,
			"email.send", "image.resize", "report.build", "webhook.deliver",
		} {
			if !strings.Contains(res.stdout, want) {
				t.Fatalf("run %d summary lacks %q:\n%s", i, want, res)
			}
		}
		// The file holds this run's jobs only.
		var l jobList
		run(t, "jobs", "list", "--json", "--limit", "1000", "--database-url", "sqlite:"+path).ok(t).decode(t, &l)
		if len(l.Jobs) != 30 {
			t.Fatalf("run %d: the demo database holds %d jobs, want 30", i, len(l.Jobs))
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDemoTerminal checks the in-place redraw used on a terminal.
func TestDemoTerminal(t *testing.T) {
	t.Parallel()
	res := runWith(t, runOpts{terminal: true}, "demo", "--jobs", "20", "--database-url", "memory:").ok(t)
	if !strings.Contains(res.stdout, "\x1b[2K\x1b[1m  QUEUE") || !strings.Contains(res.stdout, "\x1b[9A") ||
		!strings.Contains(res.stdout, "\x1b[?25h") || !strings.Contains(res.stdout, "20/20 finished") {
		t.Fatalf("terminal redraw expected:\n%q", res.stdout)
	}
	if !strings.Contains(res.stdout, "The in-memory store is gone now") {
		t.Fatalf("memory demo summary:\n%s", res.stdout)
	}
	// In colour: the bar green, the discarded count red.
	if !strings.Contains(res.stdout, "\x1b[32m█") || !strings.Contains(res.stdout, "\x1b[31m") {
		t.Fatalf("colour expected on a terminal:\n%q", res.stdout)
	}
	// NO_COLOR: the same redraw without colour.
	plain := runWith(t, runOpts{terminal: true, env: map[string]string{"NO_COLOR": "1"}}, "demo", "--jobs", "20", "--database-url", "memory:").ok(t)
	if !strings.Contains(plain.stdout, "\x1b[2K  QUEUE") || regexp.MustCompile(`\x1b\[[0-9;]*m`).MatchString(plain.stdout) {
		t.Fatalf("NO_COLOR: a redraw without colour expected:\n%q", plain.stdout)
	}
	ansi := regexp.MustCompile(`\x1b\[[0-9;]*[a-zA-Z]`)
	for _, line := range strings.Split(res.stdout, "\n") {
		line = ansi.ReplaceAllString(line, "")
		if strings.HasPrefix(line, "  ") && len([]rune(line)) > 80 && !strings.Contains(line, "pronto ") {
			t.Errorf("line wider than 80 columns breaks the redraw: %q", line)
		}
	}
}

// TestDemoLimits checks the demo's flag validation, its time limit and its interruption.
func TestDemoLimits(t *testing.T) {
	t.Parallel()
	run(t, "demo", "--jobs", "5").fails(t, ExitUsage, "--jobs 5: must be between 10 and 100000")
	run(t, "demo", "--duration", "0s").fails(t, ExitUsage, "--duration must be positive")
	run(t, "demo", "--database-url", "mysql://x").fails(t, ExitUsage, "unsupported database URL")

	// A time limit too short to finish: a summary of what was done, and exit 1.
	res := run(t, "demo", "--jobs", "300", "--duration", "1s", "--database-url", "memory:")
	if res.code != ExitError || !strings.Contains(res.stderr, "pronto: demo: jobs still unfinished after --duration 1s") ||
		!strings.Contains(res.stdout, "Stopped after 1.") {
		t.Fatalf("time limit:\n%s", res)
	}

	// Interrupted (Ctrl-C cancels the context): stops within the shutdown bound, summarizes, exit 1.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	res = runWith(t, runOpts{ctx: ctx}, "demo", "--jobs", "300", "--database-url", "memory:")
	if res.code != ExitError || !strings.Contains(res.stderr, "pronto: demo: interrupted") || !strings.Contains(res.stdout, "Stopped after") {
		t.Fatalf("interrupt:\n%s", res)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("stopping took %s", d)
	}
}

func TestDemoPlan(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 37, 300, 1000} {
		p := buildDemoPlan(n)
		total, kinds := 0, map[string]int{}
		scripted := map[string]int{}
		for _, w := range p.waves {
			for _, j := range w {
				total++
				kinds[j.Args.Kind()]++
				if _, ok := p.ids[j.Opts.ID]; !ok {
					t.Fatalf("job without a registered id")
				}
				switch a := j.Args.(type) {
				case demoWebhook:
					if a.FailTimes >= demoAttempts {
						scripted["dead"]++
					} else if a.FailTimes == 1 {
						scripted["flaky"]++
					}
				case demoEmail:
					if a.FailTimes == 1 {
						scripted["flaky"]++
					}
				case demoImage:
					if a.Corrupt {
						scripted["panic"]++
					}
				case demoReport:
					if a.WaitForUpstream {
						scripted["snooze"]++
					}
				}
				if j.Opts.Delay != 0 {
					scripted["scheduled"]++
				}
			}
		}
		discarded, flaky := expectedDemo(n)
		if total != n || len(p.ids) != n || kinds["email.send"] < n*4/10 || kinds["report.build"] < n/10 {
			t.Fatalf("n=%d: %d jobs, %d ids, kinds %v", n, total, len(p.ids), kinds)
		}
		if len(kinds) != 4 || p.expectDiscarded != discarded || scripted["dead"] != discarded ||
			p.flaky != flaky || scripted["flaky"] != flaky || scripted["panic"] != 1 || scripted["snooze"] != 1 ||
			scripted["scheduled"] != n/10 {
			t.Fatalf("n=%d: kinds %v scripted %v plan %+v", n, kinds, scripted, p)
		}
	}
}

// TestDemoInterruptedCounts: interrupted while it is still inserting, the demo counts the jobs it
// inserted (and says how many it never inserted), and the database holds exactly those.
func TestDemoInterruptedCounts(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/demo.db"
	db := []string{"--database-url", "sqlite:" + path}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first 40% are inserted at once, the rest over about 4 s: interrupt once the first part is
	// in the database, whatever the machine's speed.
	go func() {
		defer cancel()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if n, err := countDemoJobs(path); err == nil && n >= 400 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	res := runWith(t, runOpts{ctx: ctx}, with(db, "demo", "--jobs", "1000", "--json")...)
	if res.code != ExitError || !strings.Contains(res.stderr, "demo: interrupted") {
		t.Fatalf("interrupt:\n%s", res)
	}
	var s demoSummary
	res.decode(t, &s)
	total := 0
	for _, n := range s.States {
		total += n
	}
	if s.Finished || s.Inserted >= s.Jobs || s.Inserted < 400 || total != s.Inserted || s.Done > s.Inserted {
		t.Fatalf("summary: %+v", s)
	}
	var l jobList
	run(t, with(db, "jobs", "list", "--json", "--limit", "10000")...).ok(t).decode(t, &l)
	if len(l.Jobs) != s.Inserted {
		t.Fatalf("the database holds %d jobs; the summary says %d were inserted", len(l.Jobs), s.Inserted)
	}
	// The text summary says the same.
	var out strings.Builder
	printDemoSummary(&out, &s, "", false, palette{})
	want := "of the " + strconv.Itoa(s.Inserted) + " jobs inserted finished"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "were never inserted") {
		t.Fatalf("text summary lacks %q:\n%s", want, out.String())
	}
}

// countDemoJobs counts the jobs in the demo's SQLite file, read directly.
func countDemoJobs(path string) (int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(1000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRow(`SELECT count(*) FROM pronto_jobs`).Scan(&n)
	return n, err
}
