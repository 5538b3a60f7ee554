//go:build !benchworker

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fixRun is a run with the given figures.
func fixRun(sc, sys string, kv map[string]float64) *runResult {
	r := &runResult{Scenario: sc, System: sys, Run: 1, Metrics: map[string]num{}}
	for k, v := range kv {
		r.set(k, v)
	}
	return r
}

// fixGroup groups runs as writeReport does.
func fixGroup(rs ...*runResult) map[string]map[string][]*runResult {
	g := map[string]map[string][]*runResult{}
	for _, r := range rs {
		if g[r.Scenario] == nil {
			g[r.Scenario] = map[string][]*runResult{}
		}
		g[r.Scenario][r.System] = append(g[r.Scenario][r.System], r)
	}
	return g
}

// fixTargetRow returns the target row named name.
func fixTargetRow(t *testing.T, rows [][3]string, name string) [3]string {
	t.Helper()
	for _, r := range rows {
		if r[0] == name {
			return r
		}
	}
	t.Fatalf("no target row %q in %v", name, rows)
	return [3]string{}
}

// TestAdvantageNamesTheZeroSide: a side at 0 has no ratio, and the "pronto vs" column names the side
// that measured 0, whichever way the figure points (it once swapped them on higher-is-better
// figures: River default draining 0 jobs/s read "pronto 0").
func TestAdvantageNamesTheZeroSide(t *testing.T) {
	for _, c := range []struct {
		k    string
		p, o float64
		want string
	}{
		{"drain_jobs_per_s", 1000, 0, "other 0"},
		{"completions_per_s", 0, 25, "pronto 0"},
		{"jobs_lost", 0, 6, "pronto 0"},
		{"jobs_lost", 6, 0, "other 0"},
		{"jobs_lost", 0, 0, "same"},
		{"drain_jobs_per_s", 2000, 1000, "**2.00× better**"},
		{"pickup_p95_ms", 2, 1, "2.00× worse"},
	} {
		if got := advantage(c.k, c.p, c.o); got != c.want {
			t.Errorf("advantage(%s, %v, %v) = %q, want %q", c.k, c.p, c.o, got, c.want)
		}
	}
}

// TestDrainTargetWithoutRiverTunedIsNotJudged: a drain run without River tuned (e.g. --systems
// pronto,sql-limit) has no River tuned row: the targets comparing with it are n/a, as the bulk insert
// target is, not "n/a× River tuned (n/a)" and MISSED; pronto-2000w's row likewise.
func TestDrainTargetWithoutRiverTunedIsNotJudged(t *testing.T) {
	g := fixGroup(
		fixRun("drain", "pronto", map[string]float64{"drain_jobs_per_s": 40_000}),
		fixRun("drain", "pronto-2000w", map[string]float64{"drain_jobs_per_s": 45_000}),
		fixRun("drain", "sql-limit", map[string]float64{"drain_jobs_per_s": 80_000}),
	)
	rows := targets(g, options{})
	for _, name := range []string{"drain ≥ 2× River tuned", "drain ≥ 2× River tuned, at its 2000 workers (pronto-2000w)"} {
		r := fixTargetRow(t, rows, name)
		if r[2] != "n/a" || strings.Contains(r[1], "n/a×") {
			t.Errorf("%s: no River tuned row in the run, got %q %q", name, r[1], r[2])
		}
	}
	// The SQL limit is there: that target is judged (50% < 85%).
	if r := fixTargetRow(t, rows, "drain ≥ 85% of the SQL limit (sql-limit)"); r[2] != "**MISSED**" || !strings.HasPrefix(r[1], "50%") {
		t.Errorf("sql-limit target: got %q %q", r[1], r[2])
	}
}

// TestTargetsWithoutProntoAreNotJudged: targets are "at pronto's defaults"; an invocation that did
// not run the pronto system (e.g. --systems pronto-sqlite-procs,..., or River alone) prints them n/a,
// not MISSED with "n/a ms" / "NaN%". A pronto run whose own figure is missing is still judged.
func TestTargetsWithoutProntoAreNotJudged(t *testing.T) {
	g := fixGroup(
		fixRun("notify_latency", "pronto-sqlite-procs", map[string]float64{"pickup_p95_ms": 1.2}),
		fixRun("steady_over", "river-tuned", map[string]float64{"efficiency": 0.99}),
		fixRun("high_scale", "river-tuned", map[string]float64{"pickup_p95_ms": 20, "cpu_s": 1}),
		fixRun("drain", "river-tuned", map[string]float64{"drain_jobs_per_s": 20_000}),
		fixRun("drain", "sql-limit", map[string]float64{"drain_jobs_per_s": 80_000}),
		fixRun("tenant_flood", "river-tuned", map[string]float64{"b_p95_ratio": 100}),
		fixRun("crash_recovery", "river", map[string]float64{"jobs_lost": 6}),
	)
	for _, r := range targets(g, options{}) {
		if r[2] != "n/a" || strings.Contains(r[1], "NaN") {
			t.Errorf("%s: pronto did not run, yet %q %q", r[0], r[1], r[2])
		}
	}
	// pronto ran crash_recovery and its killed jobs never ran again (recovery not measured): missed.
	g = fixGroup(fixRun("crash_recovery", "pronto", map[string]float64{"recovery_s": math.NaN(), "jobs_lost": 3}))
	if r := fixTargetRow(t, targets(g, options{}), "crash recovery ≤ 5 s with nothing lost"); r[2] != "**MISSED**" {
		t.Errorf("pronto never recovered: got %q %q", r[1], r[2])
	}
}

// fixWriteRun writes r as dir/runs/<scenario>_<system>_run<n>.json.
func fixWriteRun(t *testing.T, dir string, r *runResult) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(dir, "runs", r.Scenario+"_"+r.System+"_run1.json")
	if err := os.WriteFile(fn, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixReportFrom writes runs into directories (one per slice) and returns the --report-from report.
func fixReportFrom(t *testing.T, dirs ...[]*runResult) string {
	t.Helper()
	out := t.TempDir()
	var names []string
	for _, rs := range dirs {
		d := t.TempDir()
		for _, r := range rs {
			fixWriteRun(t, d, r)
		}
		names = append(names, d)
	}
	if err := reportOnly(options{out: out, scenarios: scenarioOrder}, names); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fixPacedRun is a notify_latency run that recorded the given phase.
func fixPacedRun(sc, sys string, phase time.Duration, quick bool) *runResult {
	r := fixRun(sc, sys, map[string]float64{"pickup_p95_ms": 2, "pickup_p50_ms": 1})
	r.Started = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r.DurationS = 12
	r.Quick = quick
	r.Params = map[string]any{"phase_s": phase.Seconds(), "warmup_s": 1.0, "rate_hz": 20.0}
	r.Command = "go run . --scenarios " + sc + " --systems " + sys + " --phase " + phase.String()
	return r
}

// TestReportFromKeepsThePhase: runs made with --phase 10s, rebuilt with --report-from, are described
// as they ran (each run's JSON carries phase_s), with the --phase line of the direct report.
func TestReportFromKeepsThePhase(t *testing.T) {
	rep := fixReportFrom(t, []*runResult{fixPacedRun("notify_latency", "pronto", 10*time.Second, false)})
	if !strings.Contains(rep, "Enqueue phase 10s after a 1s warm-up.") {
		i := strings.Index(rep, "Enqueue phase")
		t.Errorf("runs of a 10 s phase, rebuilt with --report-from, are described as: %q", rep[i:min(len(rep), i+45)])
	}
	if !strings.Contains(rep, "Enqueue phase of the paced scenarios: **10s**") {
		t.Errorf("no --phase line in the rebuilt report")
	}
	// Runs at the default phase: no --phase line, as in the direct report.
	rep = fixReportFrom(t, []*runResult{fixPacedRun("notify_latency", "pronto", 30*time.Second, false)})
	if strings.Contains(rep, "Enqueue phase of the paced scenarios") || !strings.Contains(rep, "Enqueue phase 30s after") {
		t.Errorf("runs at the default phase: the report says otherwise")
	}
}

// TestReportFromSaysWhenRunsDisagree: merged runs of different phases are not described as one phase
// silently; nor are quick and full runs merged described as quick.
func TestReportFromSaysWhenRunsDisagree(t *testing.T) {
	rep := fixReportFrom(t,
		[]*runResult{fixPacedRun("notify_latency", "pronto", 10*time.Second, false)},
		[]*runResult{fixPacedRun("notify_latency", "river", 30*time.Second, false), fixPacedRun("high_scale", "pronto", 30*time.Second, true)},
	)
	for _, want := range []string{
		"The merged paced runs differ in their enqueue phase: 10s (1 runs), 30s (2 runs)",
		"Enqueue phase 10s, 30s after a 1s warm-up (the runs differ).",
		"1 of the 3 merged runs were quick",
		"mode: full",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(rep, "Enqueue phase of the paced scenarios") {
		t.Errorf("runs of two phases described with one --phase")
	}
	// Every run quick: a quick report.
	rep = fixReportFrom(t, []*runResult{fixPacedRun("notify_latency", "pronto", 2*time.Second, true)})
	if !strings.Contains(rep, "mode: quick") {
		t.Errorf("every run quick, the report is not")
	}
}

// TestReportFromWallTimeCountsKeptRuns: --report-from merges directories, a later file for the same
// scenario, system and run replacing an earlier one; the replaced run's duration is not in the
// report's wall time.
func TestReportFromWallTimeCountsKeptRuns(t *testing.T) {
	var dirs [][]*runResult
	for range 2 {
		r := fixRun("insert", "pronto", map[string]float64{"insert_single_per_s": 3000})
		r.Started = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		r.DurationS = 100
		dirs = append(dirs, []*runResult{r})
	}
	rep := fixReportFrom(t, dirs...)
	if !strings.Contains(rep, "wall time 1m40s") {
		line, _, _ := strings.Cut(rep[strings.Index(rep, "- Date"):], "\n")
		t.Errorf("one run of 100 s kept (the other replaced), report says: %s", line)
	}
}

// fixPaced records n window jobs 50 ms apart, each started 1 ms after its insert, but for those
// skip says never started, and analyzes them as notify_latency (or sc) would.
func fixPaced(sc scenario, n int, skip func(seq int64) bool) *runResult {
	t0 := time.Unix(1_800_000_000, 0)
	t1 := t0.Add(sc.phase)
	rec := newRecorder(0, false)
	insStart, insEnd := make([]int64, n), make([]int64, n)
	for seq := int64(0); seq < int64(n); seq++ {
		ins := t0.Add(time.Duration(seq) * 50 * time.Millisecond).UnixNano()
		insStart[seq], insEnd[seq] = ins, ins+int64(500*time.Microsecond)
		if skip(seq) {
			continue
		}
		start := ins + int64(time.Millisecond) + seq*1000
		rec.add(ev{kind: 'E', seq: seq, ins: ins, start: start, end: start + 1000, attempt: 1, ok: true, tenant: int16(tenantOf(sc, seq))})
	}
	res := &runResult{Metrics: map[string]num{}, Params: map[string]any{}}
	res.set("jobs_inserted", float64(n))
	rc := &runCtx{sc: sc, res: res}
	analyzePaced(rc, rec, t0, t1, t1.Add(5*time.Second), 0, -1, false, sc.workers, insStart, insEnd)
	return res
}

// TestPickupCountsJobsNeverStarted: in a paced run where a fifth of the window's jobs never started
// by the end of the run (a system that fell behind), the pickup percentiles count each with its wait
// until the run's end, so the p95 is not the 1 ms of the fast ones; the count is kept and noted.
func TestPickupCountsJobsNeverStarted(t *testing.T) {
	sc := scenarios(false)["notify_latency"]
	res := fixPaced(sc, 100, func(seq int64) bool { return seq%5 == 4 })
	p50, p95, max := res.get("pickup_p50_ms"), res.get("pickup_p95_ms"), res.get("pickup_max_ms")
	if p95 < 1000 {
		t.Errorf("20 of 100 window jobs never started; pickup p95 reported %.3f ms, max %.3f ms", p95, max)
	}
	// The first job never started (seq 4, inserted at t0+200ms) waited until t1+5s at least.
	if want := float64(sc.phase+5*time.Second-200*time.Millisecond) / 1e6; max != want {
		t.Errorf("pickup max %.3f ms, want %.3f (run end − insert of the earliest never-started job)", max, want)
	}
	if p50 > 2 {
		t.Errorf("pickup p50 %.3f ms: 80 of 100 jobs started within about 1 ms", p50)
	}
	if n := res.get("pickup_never_started"); n != 20 {
		t.Errorf("pickup_never_started = %v, want 20", n)
	}
	if len(res.Notes) == 0 || !strings.Contains(res.Notes[0], "20 job(s)") {
		t.Errorf("no note of the jobs never started: %v", res.Notes)
	}
}

// TestPickupUnchangedWhenEveryJobStarts: when every job starts, the figures are those computed over
// the started jobs alone, as before jobs never started were counted; the count is 0 and no note.
func TestPickupUnchangedWhenEveryJobStarts(t *testing.T) {
	for _, name := range []string{"notify_latency", "noisy_neighbor"} {
		sc := scenarios(false)[name]
		res := fixPaced(sc, 200, func(int64) bool { return false })
		var pick []float64
		tenants := map[int][]float64{}
		for seq := int64(0); seq < 200; seq++ {
			ms := float64(int64(time.Millisecond)+seq*1000) / 1e6
			pick = append(pick, ms)
			tenants[tenantOf(sc, seq)] = append(tenants[tenantOf(sc, seq)], ms)
		}
		sp := sortedCopy(pick)
		for k, p := range map[string]float64{"pickup_p50_ms": 50, "pickup_p95_ms": 95, "pickup_p99_ms": 99, "pickup_max_ms": 100} {
			if got, want := res.get(k), percentile(sp, p); got != want {
				t.Errorf("%s: %s = %v, want %v", name, k, got, want)
			}
		}
		if !reflect.DeepEqual(res.PickupMs, sampleSorted(sp, 4000)) {
			t.Errorf("%s: the CDF sample differs", name)
		}
		if sc.fairness {
			if got, want := res.get("noisy_tenant_p95_ms"), percentile(sortedCopy(tenants[0]), 95); got != want {
				t.Errorf("%s: noisy tenant p95 %v, want %v", name, got, want)
			}
		}
		if n := res.get("pickup_never_started"); n != 0 || len(res.Notes) != 0 {
			t.Errorf("%s: every job started, yet %v never started, notes %v", name, n, res.Notes)
		}
	}
}

// TestNeverStartedRowOnlyWhenNonzero: the report shows the jobs never started only where some run
// had one.
func TestNeverStartedRowOnlyWhenNonzero(t *testing.T) {
	report := func(n float64) string {
		r := fixPacedRun("notify_latency", "pronto", 30*time.Second, false)
		r.set("pickup_never_started", n)
		return fixReportFrom(t, []*runResult{r})
	}
	if strings.Contains(report(0), labels["pickup_never_started"]) {
		t.Errorf("a row of jobs never started although none was")
	}
	if !strings.Contains(report(3), "| "+labels["pickup_never_started"]+" | 3.00 |") {
		t.Errorf("no row of 3 jobs never started")
	}
}
