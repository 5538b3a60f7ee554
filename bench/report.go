//go:build !benchworker

package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// metric directions: +1 higher is better, -1 lower is better, 0 neither.
var direction = map[string]int{
	"completions_per_s": 1, "worker_ends_per_s": 1, "efficiency": 1, "drain_jobs_per_s": 1, "inserts_per_s": 1,
	"insert_single_per_s": 1, "insert_batch100_per_s": 1, "insert_batch1000_per_s": 1, "jobs_completed": 1,
	"pickup_p50_ms": -1, "pickup_p95_ms": -1, "pickup_p99_ms": -1, "goroutines_max": -1, "rss_max_mb": -1,
	"cpu_s": -1, "cpu_us_per_job": -1, "drain_time_s": -1, "drain_s": -1, "recovery_s": -1, "jobs_lost": -1,
	"wal_bytes_per_job_batch1": -1, "wal_bytes_per_job_batch10": -1, "orphans_not_rerun": -1,
	"duplicate_completions": -1, "noisy_tenant_p95_ms": -1, "quiet_tenants_p95_ms": -1, "jobs_unfinished": -1,
	"staged_jobs_per_s": 1, "atomic_jobs_per_s": 1, "staged_drain_s": -1, "atomic_drain_s": -1,
	"staged_cpu_us_per_job": -1, "atomic_cpu_us_per_job": -1, "staged_duplicate_rows": -1, "atomic_duplicate_rows": -1,
	"staged_jobs_not_completed": -1, "atomic_jobs_not_completed": -1, "pickup_never_started": -1,
}

// hideWhenZero are figures whose row the report shows only when some run measured other than 0.
var hideWhenZero = map[string]bool{"pickup_never_started": true}

var labels = map[string]string{
	"completions_per_s": "completions/s (measured window)", "worker_ends_per_s": "worker returns/s (not yet persisted included)", "completed": "completed in window",
	"completed_total": "completed (whole run)", "efficiency": "efficiency (completions/s ÷ capacity)",
	"drain_time_s": "drain time after enqueue phase (s)", "pickup_p50_ms": "pickup p50 (ms)",
	"pickup_p95_ms": "pickup p95 (ms)", "pickup_p99_ms": "pickup p99 (ms)", "goroutines_max": "goroutines (max, per worker process)",
	"rss_max_mb": "RSS max (MB, per worker process)", "cpu_s": "CPU seconds (worker processes)",
	"fairness_ratio": "fairness ratio (noisy p95 ÷ quiet p95)", "noisy_tenant_p95_ms": "noisy tenant p95 (ms)",
	"quiet_tenants_p95_ms": "quiet tenants p95 (ms)", "jobs_completed": "jobs completed", "attempts_failed": "failed attempts",
	"jobs_discarded": "jobs discarded", "jobs_unfinished": "jobs unfinished at the end", "jobs_lost": "jobs lost",
	"orphaned_jobs": "jobs running in the killed process", "orphans_not_rerun": "of those, not run again by the end",
	"recovery_s": "time until the killed process's jobs ran again (s, worst)", "reruns": "re-runs (starts beyond the first)",
	"duplicate_completions": "duplicate completions", "drain_jobs_per_s": "drain jobs/s", "drain_s": "drain time (s)",
	"workers": "workers", "cpu_us_per_job": "CPU µs per job", "insert_single_per_s": "single insert jobs/s",
	"insert_batch100_per_s": "batch of 100 jobs/s", "insert_batch1000_per_s": "batch of 1000 jobs/s",
	"inserts_per_s": "inserts/s", "wal_bytes_per_job_batch1": "WAL bytes per job (batches of 1)",
	"wal_bytes_per_job_batch10": "WAL bytes per job (batches of 10)", "jobs_inserted": "jobs inserted",
	"insert_lag_p99_ms":  "harness insert lag p99 (ms)",
	"insert_call_p50_ms": "insert call p50 (ms)", "insert_call_p95_ms": "insert call p95 (ms)",
	"after_insert_p50_ms": "start after the insert call returned, p50 (ms)",
	"after_insert_p95_ms": "start after the insert call returned, p95 (ms)",
	"staged_jobs_per_s":   "staged: drain jobs/s", "atomic_jobs_per_s": "atomic: drain jobs/s",
	"atomic_vs_staged": "atomic ÷ staged jobs/s", "staged_drain_s": "staged: drain time (s)", "atomic_drain_s": "atomic: drain time (s)",
	"staged_cpu_us_per_job": "staged: worker CPU µs per job", "atomic_cpu_us_per_job": "atomic: worker CPU µs per job",
	"staged_duplicate_rows": "staged: duplicate application rows", "atomic_duplicate_rows": "atomic: duplicate application rows",
	"staged_jobs_not_completed": "staged: jobs not completed", "atomic_jobs_not_completed": "atomic: jobs not completed",
	"pickup_never_started": "window jobs never started (in the pickup figures as their wait until the run's end)",
}

func metricsFor(sc scenario) []string {
	base := []string{"goroutines_max", "rss_max_mb", "cpu_s"}
	switch sc.kind {
	case "drain":
		return append([]string{"drain_jobs_per_s", "drain_s", "workers"}, append(base, "cpu_us_per_job")...)
	case "insert":
		return []string{"insert_single_per_s", "insert_batch100_per_s", "insert_batch1000_per_s"}
	case "roundtrip":
		return append([]string{"completions_per_s", "worker_ends_per_s", "inserts_per_s"}, base...)
	case "wal":
		return []string{"wal_bytes_per_job_batch1", "wal_bytes_per_job_batch10"}
	case "flood":
		return append(floodMetrics, base...)
	case "modes":
		return []string{"staged_jobs_per_s", "atomic_jobs_per_s", "atomic_vs_staged", "staged_drain_s", "atomic_drain_s",
			"staged_cpu_us_per_job", "atomic_cpu_us_per_job", "staged_duplicate_rows", "atomic_duplicate_rows",
			"staged_jobs_not_completed", "atomic_jobs_not_completed", "workers"}
	}
	var m []string
	switch {
	case sc.killAt > 0:
		m = []string{"jobs_lost", "orphaned_jobs", "orphans_not_rerun", "recovery_s", "reruns", "duplicate_completions",
			"completions_per_s", "pickup_p50_ms", "pickup_p95_ms"}
	case sc.failPct > 0:
		m = []string{"jobs_completed", "attempts_failed", "jobs_discarded", "jobs_unfinished", "pickup_p50_ms", "pickup_p95_ms", "completions_per_s"}
	case sc.saturated:
		m = []string{"completions_per_s", "completed", "efficiency", "drain_time_s", "pickup_p50_ms", "pickup_p95_ms"}
	default:
		m = []string{"pickup_p50_ms", "pickup_p95_ms", "pickup_p99_ms", "insert_call_p50_ms", "insert_call_p95_ms",
			"after_insert_p50_ms", "after_insert_p95_ms", "completions_per_s", "completed"}
	}
	// The jobs that never started, after the pickup rows they are counted in.
	last := 0
	for i, k := range m {
		if strings.HasPrefix(k, "pickup_p") {
			last = i + 1
		}
	}
	m = append(m[:last], append([]string{"pickup_never_started"}, m[last:]...)...)
	if sc.fairness {
		m = append(m, "noisy_tenant_p95_ms", "quiet_tenants_p95_ms", "fairness_ratio")
	}
	if sc.procs > 1 && sc.killAt == 0 {
		m = append(m, "reruns", "duplicate_completions")
	}
	m = append(m, base...)
	return append(m, "jobs_inserted", "insert_lag_p99_ms")
}

// agg is a metric across runs.
type agg struct {
	med, lo, hi float64
	n           int
}

func aggregate(rs []*runResult, k string) agg {
	var xs []float64
	for _, r := range rs {
		if v, ok := r.Metrics[k]; ok && !math.IsNaN(float64(v)) {
			xs = append(xs, float64(v))
		}
	}
	if len(xs) == 0 {
		return agg{med: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	}
	s := sortedCopy(xs)
	return agg{med: percentile(s, 50), lo: s[0], hi: s[len(s)-1], n: len(s)}
}

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.IsInf(v, 0):
		return "∞"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return addCommas(strconv.FormatFloat(v, 'f', 0, 64))
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func addCommas(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtAgg(a agg) string {
	if a.n == 0 {
		return "n/a"
	}
	if a.n == 1 || a.lo == a.hi {
		return fmtNum(a.med)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(a.med), fmtNum(a.lo), fmtNum(a.hi))
}

// advantage says how pronto compares with another system on a metric (from medians).
func advantage(k string, p, o float64) string {
	d := direction[k]
	if d == 0 || math.IsNaN(p) || math.IsNaN(o) {
		return ""
	}
	if p == o {
		return "same"
	}
	// A side at 0 has no ratio: name the side that measured 0, whichever way the figure points.
	switch {
	case p == 0:
		return "pronto 0"
	case o == 0:
		return "other 0"
	}
	var r float64
	if d > 0 {
		r = p / o
	} else {
		r = o / p
	}
	switch {
	case r >= 1:
		return fmt.Sprintf("**%s× better**", fmtNum(r))
	default:
		return fmt.Sprintf("%s× worse", fmtNum(1/r))
	}
}

var sysColors = map[string]color.RGBA{
	"pronto":              {R: 0x1f, G: 0x77, B: 0xb4, A: 255},
	"river":               {R: 0xd6, G: 0x27, B: 0x28, A: 255},
	"river-tuned":         {R: 0xff, G: 0x7f, B: 0x0e, A: 255},
	"pronto-sqlite":       {R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	"pronto-memory":       {R: 0x94, G: 0x67, B: 0xbd, A: 255},
	"pronto-redis":        {R: 0x8c, G: 0x56, B: 0x4b, A: 255},
	"pronto-redis-remove": {R: 0xc4, G: 0x9c, B: 0x94, A: 255},
	"pronto-unlogged":     {R: 0x17, G: 0xbe, B: 0xcf, A: 255},
	"pronto-2000w":        {R: 0x0b, G: 0x3c, B: 0x5d, A: 255},
	"pronto-nohandoff":    {R: 0x6b, G: 0xae, B: 0xd6, A: 255},
	"pronto-noprefetch":   {R: 0x39, G: 0x3b, B: 0x79, A: 255},
	"pronto-remove":       {R: 0x8c, G: 0x6d, B: 0x31, A: 255},
	"sql-limit":           {R: 0x7f, G: 0x7f, B: 0x7f, A: 255},
	"sql-pickup":          {R: 0xbc, G: 0xbd, B: 0x22, A: 255},
}

func writeReport(o options, mi machineInfo, results []*runResult, took time.Duration) error {
	sort.SliceStable(results, func(i, j int) bool { return results[i].Run < results[j].Run })
	plotsDir := filepath.Join(o.out, "plots")
	if err := os.MkdirAll(plotsDir, 0o755); err != nil {
		return err
	}
	all := scenarios(o.quick)
	applyPhase(all, o.phase)
	// group[scenario][system] = runs
	group := map[string]map[string][]*runResult{}
	for _, r := range results {
		if group[r.Scenario] == nil {
			group[r.Scenario] = map[string][]*runResult{}
		}
		group[r.Scenario][r.System] = append(group[r.Scenario][r.System], r)
	}
	sysOrder := func(sc string) []string {
		var out []string
		for _, s := range allSystemNames {
			if _, ok := group[sc][s]; ok {
				out = append(out, s)
			}
		}
		return out
	}
	med := func(sc, sys, k string) float64 { return aggregate(group[sc][sys], k).med }

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# pronto vs River: benchmark report\n\n")
	mode := "full"
	if o.quick {
		mode = "quick (short phases, one run: proves the harness, not the numbers)"
	}
	var loads []string
	minL, maxL := math.Inf(1), math.Inf(-1)
	for _, r := range results {
		for _, l := range []string{r.LoadBefore, r.LoadAfter} {
			if f := strings.Fields(l); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					minL, maxL = math.Min(minL, v), math.Max(maxL, v)
				}
			}
		}
	}
	if !math.IsInf(minL, 0) {
		loads = append(loads, fmt.Sprintf("%.2f–%.2f", minL, maxL))
	}
	started := time.Now()
	if len(results) > 0 {
		started = results[0].Started
	}
	w("- Date: %s; mode: %s; wall time %s.\n", started.UTC().Format("2006-01-02 15:04 UTC"), mode, took.Round(time.Second))
	for _, n := range o.reportNotes {
		w("- %s\n", n)
	}
	w("- Machine: %d cores (%s), %d MB RAM, %s, kernel %s, %s. PostgreSQL %s (%s) on the same machine.\n",
		mi.Cores, mi.CPU, mi.MemoryMB, mi.OS, mi.Kernel, mi.GoVersion, mi.PostgreSQL, mi.PGSettings)
	if mi.WorkerBinaries != "" {
		w("- Worker processes (the systems whose workers run outside the harness) run %s.\n", mi.WorkerBinaries)
	} else {
		w("- Worker processes run the harness binary (every system's code in one binary; results from before 2026-11-27).\n")
	}
	w("- Host load (1-min loadavg, sampled before and after every run): %s. The machine is shared and noisy; other sessions may use the CPU and the same PostgreSQL at any time. Read ratios, not absolute times.\n", strings.Join(loads, ""))
	// Runs per scenario, from the results themselves.
	maxRun := map[string]int{}
	cmds := map[string]bool{}
	var cmdList []string
	for _, r := range results {
		if r.Run > maxRun[r.Scenario] {
			maxRun[r.Scenario] = r.Run
		}
		if r.Command != "" && !cmds[r.Command] {
			cmds[r.Command] = true
			cmdList = append(cmdList, "`"+r.Command+"`")
		}
	}
	runsNote := map[int][]string{}
	for _, name := range o.scenarios {
		if n, ok := maxRun[name]; ok {
			runsNote[n] = append(runsNote[n], name)
		}
	}
	var rn []string
	for _, n := range sortedKeys(runsNote) {
		rn = append(rn, fmt.Sprintf("%d run(s): %s", n, strings.Join(runsNote[n], ", ")))
	}
	if o.inprocRuns > 0 {
		rn = append(rn, fmt.Sprintf("pronto-sqlite and pronto-memory at most %d run(s)", o.inprocRuns))
	}
	switch {
	case o.phase > 0 && o.phase < 30*time.Second:
		w("- Enqueue phase of the paced scenarios: **%s** (shortened from the issue's 30 s to fit the time available; flag --phase).\n", o.phase)
	case o.phase > 0:
		w("- Enqueue phase of the paced scenarios: **%s** (flag --phase).\n", o.phase)
	}
	w("- Command(s), run from bench/: %s.\n", strings.Join(cmdList, "; "))
	w("- Runs per scenario and system: %s. Cells show the median, with min–max across runs when there is more than one.\n", strings.Join(rn, "; "))
	w("- Systems: **pronto** (PostgreSQL store, defaults); **river** (River v0.51.1 at its defaults); **river-tuned** (FetchCooldown 2 ms, FetchPollInterval 20 ms, 2000 workers in the drain, InsertManyFast for batches); every pronto system inserts batches with InsertManyFast, its counterpart; **pronto-sqlite** and **pronto-memory** where they make sense (no River counterpart); **pronto-unlogged** (pronto on PostgreSQL with an UNLOGGED jobs table, which a database crash empties) in the drain, insert, round-trip and WAL scenarios; **pronto-2000w** in the drain only (pronto at defaults but with River tuned's 2000 workers, to compare the drain at equal workers); **pronto-noprefetch** in the drain only (pronto with its queue's prefetch off, QueueConfig.Prefetch = NoPrefetch: claims only into free workers, pronto's default before the twenty-second session; the default prefetches through a backlog of short jobs); **pronto-remove** and **pronto-redis-remove** in the drain only (pronto on PostgreSQL, and on Redis, with QueueConfig.RemoveCompleted: each job deleted as its outcome is written, instead of kept completed for a day); **pronto-nohandoff** in notify_latency, high_scale, insert and crash_recovery only (pronto with the hand-off off, postgres.Config.NoHandoff: every pickup a notification and the producer's own claim); **sql-limit** in the drain only (no job queue: a bare table drained by 4 connections, each claiming 100 rows with SKIP LOCKED and completing the previous 100 in the same round trip: the ceiling of this machine's PostgreSQL); **sql-pickup** in notify_latency and high_scale only (no job queue either: the shortest insert-to-worker path on LISTEN/NOTIFY, a durable insert with its notification, one claim per notification, no leases: the floor of pickup latency on this machine). Each system runs in a fresh schema (or file) per run; the order of systems rotates every run.\n")
	w("- \"× better\" compares pronto's median with the other system's: above 1 pronto is better on that figure, whichever way the figure points.\n\n")

	// Headline.
	w("## Headline\n\n")
	w("| figure | pronto | River default | River tuned | pronto vs River | pronto vs River tuned |\n|---|---|---|---|---|---|\n")
	for _, h := range []struct{ sc, k string }{
		{"notify_latency", "pickup_p95_ms"}, {"high_scale", "pickup_p95_ms"}, {"high_scale", "rss_max_mb"}, {"high_scale", "goroutines_max"},
		{"steady_over", "efficiency"}, {"drain", "drain_jobs_per_s"}, {"insert", "insert_single_per_s"}, {"insert", "insert_batch100_per_s"},
		{"insert", "insert_batch1000_per_s"}, {"crash_recovery", "recovery_s"}, {"crash_recovery", "jobs_lost"},
	} {
		if group[h.sc] == nil {
			continue
		}
		p, r, t := med(h.sc, "pronto", h.k), med(h.sc, "river", h.k), med(h.sc, "river-tuned", h.k)
		w("| %s: %s | %s | %s | %s | %s | %s |\n", h.sc, labels[h.k], fmtAgg(aggregate(group[h.sc]["pronto"], h.k)),
			fmtAgg(aggregate(group[h.sc]["river"], h.k)), fmtAgg(aggregate(group[h.sc]["river-tuned"], h.k)), advantage(h.k, p, r), advantage(h.k, p, t))
	}
	w("\n")

	// Targets.
	w("## Targets (issues 6, 16 and 19) at pronto's defaults\n\n| target | pronto | verdict |\n|---|---|---|\n")
	for _, t := range targets(group, o) {
		w("| %s | %s | %s |\n", t[0], t[1], t[2])
	}
	w("\n")

	// Per scenario.
	for _, name := range o.scenarios {
		g := group[name]
		if g == nil {
			continue
		}
		sc := all[name]
		syss := sysOrder(name)
		w("## %s\n\n%s.", name, sc.desc)
		if sc.kind == "paced" {
			w(" %s", phaseLine(sc, g))
		}
		w("\n\n| figure |")
		for _, s := range syss {
			w(" %s |", s)
		}
		hasRiver := g["river"] != nil && g["pronto"] != nil
		hasTuned := g["river-tuned"] != nil && g["pronto"] != nil
		if hasRiver {
			w(" pronto vs River |")
		}
		if hasTuned {
			w(" pronto vs River tuned |")
		}
		w("\n|---|")
		for range syss {
			w("---|")
		}
		if hasRiver {
			w("---|")
		}
		if hasTuned {
			w("---|")
		}
		w("\n")
		for _, k := range metricsFor(sc) {
			any := false
			for _, s := range syss {
				if a := aggregate(g[s], k); a.n > 0 && (!hideWhenZero[k] || a.lo != 0 || a.hi != 0) {
					any = true
				}
			}
			if !any {
				continue
			}
			lab := labels[k]
			if lab == "" {
				lab = k
			}
			w("| %s |", lab)
			for _, s := range syss {
				w(" %s |", fmtAgg(aggregate(g[s], k)))
			}
			if hasRiver {
				w(" %s |", advantage(k, med(name, "pronto", k), med(name, "river", k)))
			}
			if hasTuned {
				w(" %s |", advantage(k, med(name, "pronto", k), med(name, "river-tuned", k)))
			}
			w("\n")
		}
		w("\n")
		if line := ofSQLLimit(name, g, syss); line != "" {
			w("%s\n\n", line)
		}
		for _, s := range syss {
			if len(g[s]) > 0 && !g[s][0].Quick {
				w("Workers of %s ran %s.\n", s, g[s][0].WorkersHost)
				break
			}
		}
		if note := notesOf(g, syss); note != "" {
			w("\n%s", note)
		}
		for _, pl := range plotsFor(sc, g, syss, plotsDir) {
			w("\n![%s](plots/%s)\n", pl, pl)
		}
		w("\n")
	}
	b.WriteString(methodology)
	if err := os.WriteFile(filepath.Join(o.out, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("report: %s\n", filepath.Join(o.out, "report.md"))
	return nil
}

// phaseLine describes a paced scenario's enqueue phase and warm-up as its runs recorded them (the
// scenario's own when no run did), naming each when the runs differ.
func phaseLine(sc scenario, g map[string][]*runResult) string {
	var phases, warms []time.Duration
	add := func(list []time.Duration, d time.Duration) []time.Duration {
		for _, x := range list {
			if x == d {
				return list
			}
		}
		return append(list, d)
	}
	for _, rs := range g {
		for _, r := range rs {
			ph, wu := runPhase(r)
			if ph > 0 {
				phases = add(phases, ph)
			}
			if wu > 0 {
				warms = add(warms, wu)
			}
		}
	}
	if len(phases) == 0 {
		phases = []time.Duration{sc.phase}
	}
	if len(warms) == 0 {
		warms = []time.Duration{sc.warm}
	}
	list := func(ds []time.Duration) string {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		var s []string
		for _, d := range ds {
			s = append(s, d.String())
		}
		return strings.Join(s, ", ")
	}
	if len(phases) == 1 && len(warms) == 1 {
		return fmt.Sprintf("Enqueue phase %s after a %s warm-up.", phases[0], warms[0])
	}
	return fmt.Sprintf("Enqueue phase %s after a %s warm-up (the runs differ).", list(phases), list(warms))
}

// ofSQLLimit says, for the drain, what fraction of the sql-limit system's median each other
// system's median drain reached, or "" when sql-limit did not run.
func ofSQLLimit(scenario string, g map[string][]*runResult, syss []string) string {
	limit := aggregate(g["sql-limit"], "drain_jobs_per_s").med
	if scenario != "drain" || math.IsNaN(limit) || limit <= 0 {
		return ""
	}
	var parts []string
	for _, s := range syss {
		if v := aggregate(g[s], "drain_jobs_per_s").med; s != "sql-limit" && !math.IsNaN(v) {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", s, 100*v/limit))
		}
	}
	return fmt.Sprintf("Drain as a fraction of the SQL limit (%s jobs/s, the same database in the same run): %s.", fmtNum(limit), strings.Join(parts, ", "))
}

func sortedKeys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

func notesOf(g map[string][]*runResult, syss []string) string {
	var b strings.Builder
	for _, s := range syss {
		seen := map[string]bool{}
		for _, r := range g[s] {
			for _, n := range r.Notes {
				if !seen[n] {
					seen[n] = true
					fmt.Fprintf(&b, "- %s, run %d: %s\n", s, r.Run, n)
				}
			}
			for _, e := range r.Errors {
				fmt.Fprintf(&b, "- %s, run %d: **error**: %s\n", s, r.Run, e)
			}
		}
	}
	return b.String()
}

// bestOf returns the highest of the figures that were measured (not NaN) and its name, or NaN and ""
// when none was. Ties go to the name that sorts first, so the answer does not depend on map order.
func bestOf(figures map[string]float64) (float64, string) {
	best, name := math.NaN(), ""
	for n, v := range figures {
		if math.IsNaN(v) {
			continue
		}
		if name == "" || v > best || (v == best && n < name) {
			best, name = v, n
		}
	}
	return best, name
}

// targets evaluates the targets from medians.
func targets(group map[string]map[string][]*runResult, o options) [][3]string {
	med := func(sc, sys, k string) float64 { return aggregate(group[sc][sys], k).med }
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**MISSED**"
	}
	// judge gives a target's verdict, or n/a when it was not measured: pronto did not run the
	// scenario (the invocation left it out), or a figure it is compared with (another system's row)
	// is missing. A pronto run whose own figure is missing (no pickup at all, no recovery) is judged:
	// the target was not shown to be met.
	judge := func(sc string, ok bool, against ...float64) string {
		if len(group[sc]["pronto"]) == 0 {
			return "n/a"
		}
		for _, v := range against {
			if math.IsNaN(v) {
				return "n/a"
			}
		}
		return met(ok)
	}
	// pct1 and pct are a fraction as a percentage, n/a when it was not measured.
	pct1 := func(f float64) string {
		if math.IsNaN(f) {
			return "n/a"
		}
		return fmt.Sprintf("%.1f%%", 100*f)
	}
	pct := func(f float64) string {
		if math.IsNaN(f) {
			return "n/a"
		}
		return fmt.Sprintf("%.0f%%", 100*f)
	}
	var out [][3]string
	if group["notify_latency"] != nil {
		v := med("notify_latency", "pronto", "pickup_p95_ms")
		got := fmtNum(v) + " ms"
		if f := med("notify_latency", "sql-pickup", "pickup_p95_ms"); !math.IsNaN(f) {
			got += " (sql-pickup's floor: " + fmtNum(f) + " ms)"
		}
		out = append(out, [3]string{"pickup p95 ≤ 2 ms at 20 Hz (notify_latency)", got, judge("notify_latency", v <= 2)})
	}
	if group["high_scale"] != nil {
		v := med("high_scale", "pronto", "pickup_p95_ms")
		out = append(out, [3]string{"pickup p95 ≤ 3 ms at 300 Hz (high_scale)", fmtNum(v) + " ms", judge("high_scale", v <= 3)})
		rss := med("high_scale", "pronto", "rss_max_mb")
		out = append(out, [3]string{"worker RSS ≤ 25 MB at 100 workers (high_scale)", fmtNum(rss) + " MB", judge("high_scale", rss <= 25)})
		g := med("high_scale", "pronto", "goroutines_max")
		out = append(out, [3]string{"goroutines ≤ workers + 16 = 116 at 100 workers (high_scale)", fmtNum(g), judge("high_scale", g <= 116)})
	}
	for _, s := range []string{"steady_balanced", "steady_over", "burst", "noisy_neighbor_saturated"} {
		if group[s] != nil {
			v := med(s, "pronto", "efficiency")
			out = append(out, [3]string{"≥ 98% of capacity (" + s + ")", pct1(v), judge(s, v >= 0.98)})
		}
	}
	if group["drain"] != nil {
		p, t := med("drain", "pronto", "drain_jobs_per_s"), med("drain", "river-tuned", "drain_jobs_per_s")
		vsTuned := func(v float64) string {
			if math.IsNaN(t) {
				return fmtNum(v) + " jobs/s; no River tuned row in this run"
			}
			return fmt.Sprintf("%s jobs/s = %s× River tuned (%s)", fmtNum(v), fmtNum(v/t), fmtNum(t))
		}
		out = append(out, [3]string{"drain ≥ 2× River tuned", vsTuned(p), judge("drain", p >= 2*t, t)})
		if w := med("drain", "pronto-2000w", "drain_jobs_per_s"); !math.IsNaN(w) {
			// River tuned drains with 2000 workers, pronto with 100: the same target at equal workers.
			// Judged on pronto-2000w's own row, which is there.
			v := met(w >= 2*t)
			if math.IsNaN(t) {
				v = "n/a"
			}
			out = append(out, [3]string{fmt.Sprintf("drain ≥ 2× River tuned, at its %d workers (pronto-2000w)", tunedDrainWorkers), vsTuned(w), v})
		}
		if l := med("drain", "sql-limit", "drain_jobs_per_s"); !math.IsNaN(l) {
			out = append(out, [3]string{"drain ≥ 85% of the SQL limit (sql-limit)", fmt.Sprintf("%s (%s of %s jobs/s)", pct(p/l), fmtNum(p), fmtNum(l)), judge("drain", p >= 0.85*l, l)})
		}
	}
	if group["insert"] != nil {
		for _, k := range []string{"insert_batch100_per_s", "insert_batch1000_per_s"} {
			p := med("insert", "pronto", k)
			target := "bulk insert ≥ 1.5× River (" + labels[k] + ", best River row)"
			r, row := bestOf(map[string]float64{"River": med("insert", "river", k), "River tuned": med("insert", "river-tuned", k)})
			if row == "" || math.IsNaN(p) {
				out = append(out, [3]string{target, fmtNum(p) + " jobs/s; no River row in this run", "n/a"})
				continue
			}
			out = append(out, [3]string{target, fmt.Sprintf("%s jobs/s = %s× %s (%s)", fmtNum(p), fmtNum(p/r), row, fmtNum(r)), judge("insert", p >= 1.5*r, r)})
		}
	}
	if group["high_scale"] != nil {
		p, t := med("high_scale", "pronto", "cpu_s"), med("high_scale", "river-tuned", "cpu_s")
		if !math.IsNaN(t) {
			got := fmt.Sprintf("%s s = %s× River tuned's (%s s)", fmtNum(p), fmtNum(p/t), fmtNum(t))
			if f := med("high_scale", "sql-pickup", "cpu_s"); !math.IsNaN(f) {
				got += "; sql-pickup's " + fmtNum(f) + " s"
			}
			out = append(out, [3]string{"CPU at 300 Hz ≤ 1.0× River tuned's (high_scale, worker processes)", got, judge("high_scale", p <= t, t)})
		}
	}
	for _, e := range []struct {
		sys  string
		min  float64
		name string
	}{{"pronto-sqlite", 50_000, "SQLite"}, {"pronto-memory", 300_000, "memory"}} {
		if v := med("drain", e.sys, "drain_jobs_per_s"); group["drain"] != nil && !math.IsNaN(v) {
			out = append(out, [3]string{fmt.Sprintf("%s drain ≥ %s jobs/s", e.name, fmtNum(e.min)), fmtNum(v) + " jobs/s", met(v >= e.min)})
		}
	}
	// The SQLite store's memory, in every scenario it ran.
	worst, where := math.NaN(), ""
	for sc, bySys := range group {
		if v := aggregate(bySys["pronto-sqlite"], "rss_max_mb").hi; !math.IsNaN(v) && (math.IsNaN(worst) || v > worst) {
			worst, where = v, sc
		}
	}
	if !math.IsNaN(worst) {
		out = append(out, [3]string{"SQLite store RSS ≤ 100 MB in every scenario", fmt.Sprintf("%s MB at most (%s)", fmtNum(worst), where), met(worst <= 100)})
	}
	if group["tenant_flood"] != nil {
		r := med("tenant_flood", "pronto", "b_p95_ratio")
		out = append(out, [3]string{"tenant_flood: B's pickup p95 while A drains ≤ 2× its idle p95", fmtNum(r) + "×", judge("tenant_flood", r <= 2)})
		d := med("tenant_flood", "pronto", "a_drain_vs_plain")
		out = append(out, [3]string{"tenant_flood: A's drain ≥ 0.9× the plain drain", fmtNum(d) + "×", judge("tenant_flood", d >= 0.9)})
	}
	if group["crash_recovery"] != nil {
		rec := med("crash_recovery", "pronto", "recovery_s")
		lost := med("crash_recovery", "pronto", "jobs_lost")
		out = append(out, [3]string{"crash recovery ≤ 5 s with nothing lost", fmt.Sprintf("%s s, %s lost", fmtNum(rec), fmtNum(lost)), judge("crash_recovery", rec <= 5 && lost == 0)})
	}
	return out
}

// ---- plots ----

func plotsFor(sc scenario, g map[string][]*runResult, syss []string, dir string) []string {
	var out []string
	if sc.latency || sc.killAt > 0 {
		fn := sc.name + "_pickup_cdf.png"
		if err := cdfPlot(sc.name+": pickup latency CDF (all runs pooled)", g, syss, filepath.Join(dir, fn)); err == nil {
			out = append(out, fn)
		} else {
			fmt.Fprintln(os.Stderr, "plot:", err)
		}
	}
	bars := func(fn, title, ylabel string, groups []string, keys []string, scale float64) {
		var series []barSeries
		for _, s := range syss {
			vals := make([]float64, len(keys))
			for i, k := range keys {
				vals[i] = aggregate(g[s], k).med * scale
			}
			series = append(series, barSeries{s, vals})
		}
		if err := barPlot(title, ylabel, groups, series, filepath.Join(dir, fn)); err == nil {
			out = append(out, fn)
		} else {
			fmt.Fprintln(os.Stderr, "plot:", err)
		}
	}
	switch {
	case sc.kind == "insert":
		bars("insert_throughput.png", "insert: jobs/s (median)", "jobs/s", []string{"single", "batch 100", "batch 1000"},
			[]string{"insert_single_per_s", "insert_batch100_per_s", "insert_batch1000_per_s"}, 1)
	case sc.kind == "drain":
		bars("drain_throughput.png", "drain: jobs/s (median)", "jobs/s", []string{"drain"}, []string{"drain_jobs_per_s"}, 1)
	case sc.kind == "roundtrip":
		bars("round_trip_throughput.png", "round_trip_max: completions/s (median)", "completions/s", []string{"round trip"}, []string{"completions_per_s"}, 1)
	case sc.kind == "modes":
		bars("processing_modes_throughput.png", "processing_modes: drain jobs/s (median)", "jobs/s", []string{"staged", "atomic"},
			[]string{"staged_jobs_per_s", "atomic_jobs_per_s"}, 1)
	case sc.kind == "flood":
		bars("tenant_flood_pickup.png", "tenant_flood: tenant B's pickup p95 (median)", "ms", []string{"idle queue", "while A drains"},
			[]string{"b_idle_p95_ms", "b_flood_p95_ms"}, 1)
	case sc.kind == "wal":
		bars("wal_bytes.png", "WAL bytes per job (median)", "bytes", []string{"batches of 1", "batches of 10"},
			[]string{"wal_bytes_per_job_batch1", "wal_bytes_per_job_batch10"}, 1)
	case sc.saturated:
		bars(sc.name+"_throughput.png", sc.name+": completions/s and capacity (median)", "completions/s", []string{"completions/s"},
			[]string{"completions_per_s"}, 1)
	case sc.killAt > 0:
		bars("crash_recovery.png", "crash_recovery: seconds until the killed process's jobs ran again (median; missing = never)", "seconds",
			[]string{"recovery"}, []string{"recovery_s"}, 1)
	}
	if sc.fairness {
		groups := make([]string, sc.tenants)
		for i := range groups {
			groups[i] = fmt.Sprintf("t%d", i)
			if i == 0 {
				groups[i] = "t0 (90%)"
			}
		}
		var series []barSeries
		for _, s := range syss {
			vals := make([]float64, sc.tenants)
			for i := range vals {
				var xs []float64
				for _, r := range g[s] {
					if v, ok := r.Tenants[strconv.Itoa(i)]; ok {
						xs = append(xs, v)
					}
				}
				vals[i] = median(xs)
			}
			series = append(series, barSeries{s, vals})
		}
		fn := sc.name + "_tenants.png"
		if err := barPlot(sc.name+": pickup p95 per tenant (ms, median of runs)", "ms", groups, series, filepath.Join(dir, fn)); err == nil {
			out = append(out, fn)
		}
	}
	return out
}

type barSeries struct {
	name string
	vals []float64
}

func cdfPlot(title string, g map[string][]*runResult, syss []string, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "pickup latency (ms, log scale)"
	p.Y.Label.Text = "fraction of jobs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	added := 0
	for _, s := range syss {
		var xs []float64
		for _, r := range g[s] {
			xs = append(xs, r.PickupMs...)
		}
		if len(xs) == 0 {
			continue
		}
		sort.Float64s(xs)
		pts := make(plotter.XYs, len(xs))
		for i, x := range xs {
			pts[i].X = math.Max(x, 0.01)
			pts[i].Y = float64(i+1) / float64(len(xs))
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = sysColors[s]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s, l)
		added++
	}
	if added == 0 {
		return fmt.Errorf("no pickup samples for %s", title)
	}
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

func barPlot(title, ylabel string, groups []string, series []barSeries, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	width := vg.Points(420 / float64(max(1, len(groups))*max(1, len(series))))
	if width > vg.Points(40) {
		width = vg.Points(40)
	}
	for i, s := range series {
		vals := make(plotter.Values, len(s.vals))
		for k, v := range s.vals {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v = 0
			}
			vals[k] = v
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bc.Color = sysColors[s.name]
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(float64(i)-float64(len(series)-1)/2) * width
		p.Add(bc)
		p.Legend.Add(s.name, bc)
	}
	p.NominalX(groups...)
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

const methodology = `## Methodology

- **Harness**: ` + "`cd bench && go run . [flags]`" + ` (module github.com/pronto-jobs/pronto/bench, which alone imports River). Inserts come from the
  harness process; on PostgreSQL and Redis the workers run in child processes, each a binary of its system's family only (built
  from bench/ with the tags benchworker and bw_pronto, bw_river, bw_extra or bw_sql, as a user's worker binary holds only its
  queue; with --single-binary, re-executions of the harness binary), so their RSS (VmRSS from /proc), goroutines (reported by
  the child, less its own reporting goroutines) and CPU (getrusage of the child) are the worker's alone. pronto on SQLite and
  memory runs its workers inside the harness, so their figures include the inserting harness.
- **sql-pickup**, in notify_latency and high_scale, is the floor of pickup latency: no job queue, a durable insert and its
  pg_notify in one statement, one listening connection, one claim per notification (committed without waiting for its WAL
  flush), no leases or retries. The paced scenarios also split each pickup at the moment the insert call returned.
- **Pickup latency** = the moment the worker's function began minus the moment the insert call began (carried in the job's args),
  for jobs inserted inside the measured window (a warm-up before it is excluded). A window job that had not started by the end of
  the run counts with its wait until then (run end − insert): the percentiles are then lower bounds, and the report gives the
  number of such jobs (the row "window jobs never started") where it is not 0.
- **Completions/s** counts attempts that succeeded inside the measured window (the enqueue phase) and divides by the window's length;
  nothing done during warm-up or after the window is counted. In the paced scenarios an attempt counts when the worker returns (both
  systems then write the outcome asynchronously, in batches; a paced scenario's rate is far below what
  either can write). The throughput scenarios count in the database: **drain** ends when the last
  outcome is persisted (polled every 2 ms once the last worker has returned), and **round_trip_max**
  counts finished rows at both ends of its window (worker returns are shown alongside). **Efficiency** = completions/s ÷ (workers ÷ work time).
- **Fairness ratio** = p95 pickup of the noisy tenant (90% of inserts) ÷ p95 pickup of the nine quiet tenants pooled: 1.0 is even.
- **Failures** (rate_limit_pressure) are decided by a hash of (job, attempt), so both systems fail the same attempts; each system
  retries with its own default backoff (pronto: 1 s × 2ⁿ with jitter; River: attempt⁴ s with jitter).
- **Crash recovery**: two worker processes; at t=10 s the harness SIGKILLs one. *Jobs lost* = jobs never completed by the end of the
  run; *re-runs* = starts beyond a job's first (jobs interrupted by the kill are expected to run again); *duplicate completions* = jobs
  whose work finished twice (finished in the killed process but not yet recorded); *recovery* = the worst time from the kill until an
  interrupted job started again elsewhere. River rescues stuck jobs after RescueStuckJobsAfter (1 h by default), so within the run its
  interrupted jobs do not run again: that is River's default, shown as measured.
- **Drain**: the backlog is loaded first (not measured); jobs/s = jobs ÷ (last completion − the earlier of worker start and first job start).
- **Insert**: one caller, back to back, for a fixed time per mode, no workers running. River default uses InsertMany; River tuned uses
  InsertManyFast (COPY). pronto's batches go through InsertManyFast, its counterpart (the jobs are not returned): on PostgreSQL one
  INSERT of arrays carrying only the columns in which the jobs differ, up to 10,000 jobs, COPY beyond.
- **WAL**: pg_current_wal_lsn() before the first insert and after the database shows every job completed, divided by the jobs;
  includes everything the system wrote meanwhile (heartbeats, leader election, maintenance) and anything else the shared server
  wrote in that time.
- **processing_modes** (after seed 002): a backlog of jobs, each writing one row of its own to an application table in the
  same database; *staged* writes the row with the pool (it commits) and returns, and the system writes the outcome afterwards;
  *atomic* writes the row and completes the job in one transaction (pronto.CompleteTx, river.JobCompleteTx). Each mode drains in
  a fresh schema, the order alternating between runs; jobs/s as in drain. After each drain the harness fails the run unless the
  table holds exactly one row per job and every job is completed.
- pgx pools are at pgxpool defaults (max(4, cores) connections) for both systems.
`
