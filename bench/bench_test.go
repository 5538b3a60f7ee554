//go:build !benchworker

package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as a worker process too, as the bench binary does.
func TestMain(m *testing.M) {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	if raw := os.Getenv(isolatedEnv); raw != "" {
		os.Exit(runIsolatedChild(raw))
	}
	os.Exit(m.Run())
}

// insertRun is a run of the insert scenario by sys with the given batch figures.
func insertRun(sys string, b100, b1000 float64) *runResult {
	r := &runResult{Scenario: "insert", System: sys, Run: 1, Metrics: map[string]num{}}
	r.set("insert_batch100_per_s", b100)
	r.set("insert_batch1000_per_s", b1000)
	return r
}

// TestBulkInsertTargetUsesBestRiverRowPresent: the bulk insert target compares pronto with the best
// River row the run has. With River tuned alone it is that row (it once printed "n/a×" and MISSED
// because River's default row was missing); with both, the faster one; with neither, no verdict.
func TestBulkInsertTargetUsesBestRiverRowPresent(t *testing.T) {
	bulk := func(rows [][3]string) [][3]string {
		var out [][3]string
		for _, r := range rows {
			if strings.HasPrefix(r[0], "bulk insert") {
				out = append(out, r)
			}
		}
		return out
	}
	group := func(rs ...*runResult) map[string]map[string][]*runResult {
		g := map[string]map[string][]*runResult{}
		for _, r := range rs {
			if g[r.Scenario] == nil {
				g[r.Scenario] = map[string][]*runResult{}
			}
			g[r.Scenario][r.System] = append(g[r.Scenario][r.System], r)
		}
		return g
	}

	// River tuned only: 30,000 / 20,000 = 1.5× met; 40,000 / 30,000 = 1.33× missed.
	rows := bulk(targets(group(insertRun("pronto", 30000, 40000), insertRun("river-tuned", 20000, 30000)), options{}))
	if len(rows) != 2 {
		t.Fatalf("want 2 bulk insert rows, got %v", rows)
	}
	for _, r := range rows {
		if strings.Contains(r[1], "n/a") || strings.Contains(r[1], "NaN") {
			t.Errorf("%s: %q compares with a missing row", r[0], r[1])
		}
		if !strings.Contains(r[1], "River tuned") {
			t.Errorf("%s: %q does not name River tuned", r[0], r[1])
		}
	}
	if rows[0][2] != "met" || !strings.Contains(rows[0][1], "1.50×") {
		t.Errorf("batch of 100: got %q %q, want 1.50× met", rows[0][1], rows[0][2])
	}
	if rows[1][2] != "**MISSED**" || !strings.Contains(rows[1][1], "1.33×") {
		t.Errorf("batch of 1000: got %q %q, want 1.33× MISSED", rows[1][1], rows[1][2])
	}

	// Both River rows: the faster one per figure is the reference.
	rows = bulk(targets(group(insertRun("pronto", 30000, 40000), insertRun("river", 25000, 10000),
		insertRun("river-tuned", 20000, 30000)), options{}))
	if !strings.Contains(rows[0][1], "River (25,000)") || rows[0][2] != "**MISSED**" {
		t.Errorf("batch of 100 against River's 25,000: got %q %q", rows[0][1], rows[0][2])
	}
	if !strings.Contains(rows[1][1], "River tuned (30,000)") {
		t.Errorf("batch of 1000 against River tuned's 30,000: got %q", rows[1][1])
	}

	// No River row: no verdict rather than a miss.
	rows = bulk(targets(group(insertRun("pronto", 30000, 40000)), options{}))
	for _, r := range rows {
		if r[2] != "n/a" {
			t.Errorf("%s without River rows: verdict %q, want n/a", r[0], r[2])
		}
	}
}

// TestQuick runs the harness end to end in quick mode and checks that every figure was produced:
// every run file exists with no error and no missing (NaN) figure where one is expected, and the
// report and plots exist. It never asserts a speed. BENCH_SCENARIOS narrows it (default: all).
func TestQuick(t *testing.T) {
	selected := envOr("BENCH_SCENARIOS", "all")
	if testing.Short() && os.Getenv("CI") == "" && os.Getenv("BENCH_SCENARIOS") == "" {
		// -short on a laptop runs two scenarios instead of all of them (about 3 minutes); CI runs all.
		selected = "notify_latency,drain"
	}
	url := envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	out := t.TempDir()
	o := options{
		dbURL: url, runs: 1, quick: true, out: out,
		scenarios: splitList(selected, scenarioOrder),
		systems:   allSystemNames,
	}
	if err := run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	all := scenarios(true)
	byName := systemsByName()
	for _, name := range o.scenarios {
		sc := all[name]
		for _, sn := range o.systems {
			sys := byName[sn]
			if !applies(sc, sys) {
				continue
			}
			fn := filepath.Join(out, "runs", name+"_"+sn+"_run1.json")
			b, err := os.ReadFile(fn)
			if err != nil {
				t.Errorf("%s/%s: no run file: %v", name, sn, err)
				continue
			}
			var r runResult
			if err := json.Unmarshal(b, &r); err != nil {
				t.Errorf("%s/%s: bad JSON: %v", name, sn, err)
				continue
			}
			if len(r.Errors) > 0 {
				t.Errorf("%s/%s: errors: %s", name, sn, strings.Join(r.Errors, "; "))
			}
			if r.Machine.Cores == 0 || r.Machine.GoVersion == "" || r.Machine.PostgreSQL == "" {
				t.Errorf("%s/%s: machine info missing: %+v", name, sn, r.Machine)
			}
			for _, k := range expectedFigures(sc, sys) {
				v, ok := r.Metrics[k]
				if !ok || math.IsNaN(float64(v)) {
					t.Errorf("%s/%s: figure %s missing or NaN", name, sn, k)
				}
			}
			if sc.fairness && len(r.Tenants) < 2 {
				t.Errorf("%s/%s: %d per-tenant figures, want several", name, sn, len(r.Tenants))
			}
			for _, k := range metricsFor(sc) {
				if _, ok := r.Metrics[k]; !ok {
					t.Errorf("%s/%s: figure %s not recorded", name, sn, k)
				}
			}
			if sc.latency && len(r.PickupMs) == 0 {
				t.Errorf("%s/%s: no pickup samples for the CDF", name, sn)
			}
		}
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	plots, _ := filepath.Glob(filepath.Join(out, "plots", "*.png"))
	if len(plots) == 0 {
		t.Error("no plots written")
	}
	for _, p := range plots {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("plot %s empty or missing", p)
		}
		if !strings.Contains(string(report), "plots/"+filepath.Base(p)) {
			t.Errorf("report does not show %s", filepath.Base(p))
		}
	}
	for _, name := range o.scenarios {
		if !strings.Contains(string(report), "## "+name) {
			t.Errorf("report has no section for %s", name)
		}
	}
}

// expectedFigures lists the figures a quick run must produce as numbers. Figures that can be
// legitimately unmeasurable (a drain time when the backlog did not drain, a recovery time when the
// killed process's jobs never ran again, as with River's one-hour rescue) are checked for presence only.
func expectedFigures(sc scenario, sys system) []string {
	var ks []string
	for _, k := range metricsFor(sc) {
		switch k {
		case "drain_time_s", "recovery_s", "drain_s":
			continue
		case "insert_lag_p99_ms":
			continue
		case "b_flood_p95_loading_ms", "b_flood_p95_loaded_ms":
			// B's pickups split where A's backlog is all inserted: a system that starts A's jobs
			// only after that has none before it.
			continue
		}
		ks = append(ks, k)
	}
	return ks
}

// TestOfSQLLimit: the drain's line reads each system's median as a fraction of sql-limit's, and
// there is no line without sql-limit or for another scenario.
func TestOfSQLLimit(t *testing.T) {
	r := func(v float64) *runResult { return &runResult{Metrics: map[string]num{"drain_jobs_per_s": num(v)}} }
	g := map[string][]*runResult{
		"pronto":      {r(30), r(40), r(35)},
		"river-tuned": {r(20)},
		"sql-limit":   {r(50)},
	}
	syss := []string{"pronto", "river-tuned", "sql-limit"}
	got := ofSQLLimit("drain", g, syss)
	for _, want := range []string{"pronto 70%", "river-tuned 40%", "(50.0 jobs/s"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "sql-limit 100%") {
		t.Errorf("sql-limit is not compared with itself: %q", got)
	}
	if l := ofSQLLimit("insert", g, syss); l != "" {
		t.Errorf("insert got a line: %q", l)
	}
	delete(g, "sql-limit")
	if l := ofSQLLimit("drain", g, syss[:2]); l != "" {
		t.Errorf("no sql-limit, yet a line: %q", l)
	}
}

// TestLaterIssuesTargets: the targets of issues 16 and 19 are judged from the runs present: CPU at
// 300 Hz against River tuned's (and the pickup targets with sql-pickup's figures beside them), the embedded stores' drains, the SQLite store's worst RSS in any
// scenario, and tenant_flood's two ratios.
func TestLaterIssuesTargets(t *testing.T) {
	run := func(sc, sys string, kv map[string]float64) *runResult {
		r := &runResult{Scenario: sc, System: sys, Run: 1, Metrics: map[string]num{}}
		for k, v := range kv {
			r.set(k, v)
		}
		return r
	}
	g := map[string]map[string][]*runResult{}
	for _, r := range []*runResult{
		run("high_scale", "pronto", map[string]float64{"cpu_s": 1.5}),
		run("high_scale", "river-tuned", map[string]float64{"cpu_s": 1.0}),
		run("high_scale", "sql-pickup", map[string]float64{"cpu_s": 2.0}),
		run("notify_latency", "pronto", map[string]float64{"pickup_p95_ms": 3.0}),
		run("notify_latency", "sql-pickup", map[string]float64{"pickup_p95_ms": 2.1}),
		run("high_scale", "pronto-sqlite", map[string]float64{"rss_max_mb": 40}),
		run("drain", "pronto-sqlite", map[string]float64{"drain_jobs_per_s": 60_000, "rss_max_mb": 120}),
		run("drain", "pronto-memory", map[string]float64{"drain_jobs_per_s": 200_000}),
		run("tenant_flood", "pronto", map[string]float64{"b_p95_ratio": 1.5, "a_drain_vs_plain": 0.8}),
		run("drain", "pronto", map[string]float64{"drain_jobs_per_s": 30_000}),
		run("drain", "pronto-2000w", map[string]float64{"drain_jobs_per_s": 50_000}),
		run("drain", "pronto-noprefetch", map[string]float64{"drain_jobs_per_s": 25_000}),
		run("drain", "river-tuned", map[string]float64{"drain_jobs_per_s": 20_000}),
	} {
		if g[r.Scenario] == nil {
			g[r.Scenario] = map[string][]*runResult{}
		}
		g[r.Scenario][r.System] = append(g[r.Scenario][r.System], r)
	}
	want := map[string][2]string{
		"CPU at 300 Hz ≤ 1.0× River tuned's (high_scale, worker processes)": {"1.50× River tuned's (1.00 s); sql-pickup's 2.00 s", "**MISSED**"},
		"pickup p95 ≤ 2 ms at 20 Hz (notify_latency)":                       {"3.00 ms (sql-pickup's floor: 2.10 ms)", "**MISSED**"},
		"SQLite drain ≥ 50,000 jobs/s":                                      {"60,000", "met"},
		"memory drain ≥ 300,000 jobs/s":                                     {"200,000", "**MISSED**"},
		"SQLite store RSS ≤ 100 MB in every scenario":                       {"120 MB at most (drain)", "**MISSED**"},
		"tenant_flood: B's pickup p95 while A drains ≤ 2× its idle p95":     {"1.50×", "met"},
		"tenant_flood: A's drain ≥ 0.9× the plain drain":                    {"0.800×", "**MISSED**"},
		"drain ≥ 2× River tuned":                                            {"30,000 jobs/s = 1.50× River tuned (20,000)", "**MISSED**"},
		"drain ≥ 2× River tuned, at its 2000 workers (pronto-2000w)":        {"50,000 jobs/s = 2.50× River tuned (20,000)", "met"},
	}
	got := map[string][2]string{}
	for _, r := range targets(g, options{}) {
		got[r[0]] = [2]string{r[1], r[2]}
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("no target row %q in %v", name, got)
			continue
		}
		if !strings.Contains(g[0], w[0]) || g[1] != w[1] {
			t.Errorf("%s: got %q %q, want %q in it and %q", name, g[0], g[1], w[0], w[1])
		}
	}
}

// TestCounterKeepsNoEvents: round_trip_max's recorder counts outcomes without holding an event per
// job (which an in-process system's RSS would count), while a full recorder keeps every event.
func TestCounterKeepsNoEvents(t *testing.T) {
	full, counter := newRecorder(0, false), newCounter()
	for i := range 1000 {
		e := ev{seq: int64(i), end: int64(i + 1), attempt: 1, ok: i%4 != 0, kind: 'E'}
		full.add(e)
		counter.add(e)
	}
	if n := len(counter.events()); n != 0 {
		t.Errorf("the counter kept %d events, want none", n)
	}
	if n := len(full.events()); n != 1000 {
		t.Errorf("the full recorder kept %d events, want 1000", n)
	}
	for _, r := range []*recorder{full, counter} {
		if ok, term, last := r.okEnds.Load(), r.terminal.Load(), r.lastEnd.Load(); ok != 750 || term != 750 || last != 1000 {
			t.Errorf("counters: %d ok ends, %d terminal, last end %d; want 750, 750, 1000", ok, term, last)
		}
	}
}
