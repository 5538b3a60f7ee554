//go:build !benchworker

// Command bench runs pronto and River side by side against the same PostgreSQL, scenario by scenario,
// and writes one JSON file per run, a Markdown report and plots.
//
//	cd bench && go run . --out results            # every scenario, 3 runs each
//	cd bench && go run . --quick --out /tmp/q      # every scenario, short phases, one run (CI)
//	cd bench && go run . --scenarios notify_latency,drain --systems pronto,river --runs 5
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// num is a float that encodes NaN (a figure that could not be measured) as JSON null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', 8, 64)), nil
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*n = num(f)
	return err
}

type machineInfo struct {
	Cores      int    `json:"cores"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Kernel     string `json:"kernel"`
	CPU        string `json:"cpu"`
	MemoryMB   int64  `json:"memory_mb"`
	PostgreSQL string `json:"postgresql"`
	PGSettings string `json:"pg_settings"`
	// WorkerBinaries says what the worker processes ran: a binary per system family, or the
	// harness's own (before 2026-11-27, and with --single-binary).
	WorkerBinaries string `json:"worker_binaries,omitempty"`
}

// runResult is one run of one scenario by one system: what the JSON files hold.
type runResult struct {
	Scenario    string             `json:"scenario"`
	System      string             `json:"system"`
	Run         int                `json:"run"`
	Started     time.Time          `json:"started"`
	DurationS   float64            `json:"duration_s"`
	Quick       bool               `json:"quick"`
	Params      map[string]any     `json:"params"`
	Metrics     map[string]num     `json:"metrics"`
	Tenants     map[string]float64 `json:"tenant_p95_ms,omitempty"`
	PickupMs    []float64          `json:"pickup_ms_sample,omitempty"`
	LoadBefore  string             `json:"loadavg_before"`
	LoadAfter   string             `json:"loadavg_after"`
	WorkersHost string             `json:"workers_host"`
	Command     string             `json:"command"`
	Notes       []string           `json:"notes,omitempty"`
	Errors      []string           `json:"errors,omitempty"`
	Machine     machineInfo        `json:"machine"`
}

func (r *runResult) set(k string, v float64) { r.Metrics[k] = num(v) }
func (r *runResult) get(k string) float64 {
	v, ok := r.Metrics[k]
	if !ok {
		return math.NaN()
	}
	return float64(v)
}

// allSystemNames is every system in the order the report lists them.
var allSystemNames = []string{"pronto", "river", "river-tuned", "pronto-sqlite", "pronto-memory", "pronto-redis", "pronto-redis-remove", "pronto-unlogged", "pronto-2000w", "pronto-noprefetch", "pronto-remove", "pronto-nohandoff", "sql-limit", "sql-pickup",
	"pronto-sqlite-procs", "pronto-sqlite-redisnotify", "pronto-nolisten", "pronto-nolisten-redisnotify"}

type options struct {
	dbURL      string
	runs       int
	scenarios  []string
	systems    []string
	out        string
	quick      bool
	runsFor    map[string]int
	headline   int
	phase      time.Duration
	inprocRuns int
	// singleBinary runs worker processes from the harness binary (workerbin.go).
	singleBinary bool
	// reportNotes are lines for the report's header (--report-from: what the merged runs disagree on).
	reportNotes []string
}

func main() {
	if raw := os.Getenv(childEnv); raw != "" {
		os.Exit(runChild(raw))
	}
	if raw := os.Getenv(isolatedEnv); raw != "" {
		os.Exit(runIsolatedChild(raw))
	}
	var o options
	var scen, sys, runsFor string
	flag.StringVar(&o.dbURL, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	flag.IntVar(&o.runs, "runs", 3, "runs per scenario and system")
	flag.StringVar(&runsFor, "runs-for", "", "per-scenario runs overriding --runs, e.g. burst=1,wal=1")
	flag.IntVar(&o.headline, "headline-runs", 0, "if set, --runs applies to the headline scenarios and this many runs to the rest")
	flag.StringVar(&scen, "scenarios", "all", "comma-separated scenarios ("+strings.Join(scenarioOrder, ",")+")")
	flag.StringVar(&sys, "systems", "all", "comma-separated systems ("+strings.Join(allSystemNames, ",")+")")
	flag.StringVar(&o.out, "out", "bench-results", "output directory")
	flag.BoolVar(&o.quick, "quick", false, "short phases, one run, every scenario (CI)")
	flag.DurationVar(&o.phase, "phase", 0, "override the enqueue phase of the paced scenarios (default 30s; 2s with --quick)")
	flag.BoolVar(&o.singleBinary, "single-binary", false, "run worker processes from this binary (every system's code and the harness's) instead of a binary per system family")
	flag.IntVar(&o.inprocRuns, "inproc-runs", 0, "if set, at most this many runs for pronto-sqlite and pronto-memory")
	var bullmq bool
	var bullmqJobs, bullmqRuns int
	flag.BoolVar(&bullmq, "bullmq", false, "run the BullMQ comparison (bullmq-bench's four scenarios, BullMQ 5 vs pronto-redis) instead")
	flag.IntVar(&bullmqJobs, "bullmq-jobs", 20000, "measured jobs per BullMQ comparison run")
	flag.IntVar(&bullmqRuns, "bullmq-runs", 3, "runs per BullMQ comparison scenario")
	var reportFrom string
	flag.StringVar(&reportFrom, "report-from", "", "comma-separated result directories: write the report from their runs/*.json into --out, running nothing")
	flag.Parse()
	o.scenarios = splitList(scen, scenarioOrder)
	o.systems = splitList(sys, allSystemNames)
	o.runsFor = map[string]int{}
	for _, kv := range splitList(runsFor, nil) {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			fmt.Fprintln(os.Stderr, "bad --runs-for entry", kv)
			os.Exit(2)
		}
		o.runsFor[k] = n
	}
	if bullmq {
		if err := compareBullMQ(context.Background(), bullmqJobs, max(bullmqJobs/10, 100), bullmqRuns); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *httpMode {
		if err := runHTTP(context.Background(), o.dbURL); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if reportFrom != "" {
		if err := reportOnly(o, splitList(reportFrom, nil)); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func splitList(s string, all []string) []string {
	if s == "all" {
		return all
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runsOf says how many runs a scenario gets.
func (o options) runsOf(name string) int {
	if o.quick {
		return 1
	}
	if n, ok := o.runsFor[name]; ok {
		return n
	}
	if o.headline > 0 {
		for _, h := range headlineScenarios {
			if h == name {
				return o.runs
			}
		}
		return o.headline
	}
	return o.runs
}

// applies says whether a system runs a scenario.
func applies(sc scenario, sys system) bool {
	if f, ok := sys.(interface{ runs(scenario) bool }); ok {
		return f.runs(sc)
	}
	if sys.shared() {
		return true
	}
	return sc.inproc
}

func run(ctx context.Context, o options) error {
	all := scenarios(o.quick)
	applyPhase(all, o.phase)
	byName := systemsByName()
	for _, s := range o.scenarios {
		if _, ok := all[s]; !ok {
			return fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(scenarioOrder, ", "))
		}
	}
	for _, s := range o.systems {
		if _, ok := byName[s]; !ok {
			return fmt.Errorf("unknown system %q (have %s)", s, strings.Join(allSystemNames, ", "))
		}
	}
	if err := os.MkdirAll(filepath.Join(o.out, "runs"), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "pronto-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{dbURL: o.dbURL, tmpDir: tmp}
	workerBinaries = &workerBins{dir: tmp, single: o.singleBinary}
	mi, err := machine(ctx, o.dbURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", redact(o.dbURL), err)
	}
	mi.WorkerBinaries = workerBinaries.describe()
	fmt.Printf("machine: %d cores, %s, %s; PostgreSQL %s\n", mi.Cores, mi.CPU, mi.GoVersion, mi.PostgreSQL)
	began := time.Now()
	var results []*runResult
	for _, name := range o.scenarios {
		sc := all[name]
		var syss []system
		for _, s := range o.systems {
			if applies(sc, byName[s]) {
				syss = append(syss, byName[s])
			}
		}
		runs := o.runsOf(name)
		for r := 1; r <= runs; r++ {
			// Rotate the order each run (A B C, B C A, ...) so drift and warm caches hit every system.
			for k := range syss {
				sys := syss[(k+r-1)%len(syss)]
				if !sys.shared() && o.inprocRuns > 0 && r > o.inprocRuns {
					continue
				}
				res := runSystem(ctx, e, sc, sys, r, o)
				res.Machine = mi
				results = append(results, res)
				fmt.Printf("%-26s %-14s run %d  %s\n", name, sys.name(), r, summary(res))
				b, _ := json.MarshalIndent(res, "", "  ")
				fn := filepath.Join(o.out, "runs", fmt.Sprintf("%s_%s_run%d.json", name, sys.name(), r))
				if err := os.WriteFile(fn, b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	fmt.Printf("all runs done in %s\n", time.Since(began).Round(time.Second))
	return writeReport(o, mi, results, time.Since(began))
}

// applyPhase shortens (or lengthens) the enqueue phase of paced scenarios, keeping the crash at
// t=10 s and the burst at t=10 s inside it.
func applyPhase(all map[string]scenario, phase time.Duration) {
	if phase <= 0 {
		return
	}
	for k, sc := range all {
		if sc.kind == "paced" {
			sc.phase = phase
			if sc.killAt > 0 && sc.killAt >= phase {
				sc.killAt = phase / 2
			}
			if sc.burstRate > 0 && sc.burstAt+sc.burstFor > phase {
				sc.burstAt = max(0, phase-sc.burstFor)
			}
			all[k] = sc
		}
	}
}

// reportOnly rebuilds a report from the JSON files of earlier runs (several invocations may be merged;
// a later file for the same scenario, system and run replaces an earlier one). The runs say how they
// ran: the report is quick only if every run was, its wall time is the kept runs' durations, and
// the enqueue phase is the one the paced runs recorded (params phase_s).
func reportOnly(o options, dirs []string) error {
	seen := map[string]*runResult{}
	var keys []string
	var mi machineInfo
	for _, d := range dirs {
		files, err := filepath.Glob(filepath.Join(d, "runs", "*.json"))
		if err != nil {
			return err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			var r runResult
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			k := fmt.Sprintf("%s/%s/%d", r.Scenario, r.System, r.Run)
			if _, ok := seen[k]; !ok {
				keys = append(keys, k)
			}
			seen[k] = &r
			mi = r.Machine
		}
	}
	var results []*runResult
	var took float64
	quick := 0
	for _, k := range keys {
		r := seen[k]
		results = append(results, r)
		took += r.DurationS
		if r.Quick {
			quick++
		}
	}
	if quick > 0 && quick == len(results) {
		o.quick = true
	} else if quick > 0 {
		o.reportNotes = append(o.reportNotes, fmt.Sprintf("%d of the %d merged runs were quick (short phases) and the rest were not: the report is described as full.", quick, len(results)))
	}
	phase, note := phaseOfRuns(results, o.quick)
	if phase > 0 {
		o.phase = phase
	}
	if note != "" {
		o.reportNotes = append(o.reportNotes, note)
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].Started.Before(results[j].Started) })
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	return writeReport(o, mi, results, time.Duration(took*float64(time.Second)))
}

// runPhase is the enqueue phase and warm-up a run recorded in its params (0 when it did not).
func runPhase(r *runResult) (phase, warm time.Duration) {
	d := func(k string) time.Duration {
		if v, ok := r.Params[k].(float64); ok && v > 0 {
			return time.Duration(v * float64(time.Second)).Round(time.Millisecond)
		}
		return 0
	}
	return d("phase_s"), d("warmup_s")
}

// phaseOfRuns says what --phase the paced runs were made with: 0 if every one ran its scenario's
// default phase, else the one phase they share. When they do not share one (runs made with
// different --phase merged), it returns 0 and a note saying so; each scenario's section gives its
// own runs' phase.
func phaseOfRuns(results []*runResult, quick bool) (time.Duration, string) {
	defaults := scenarios(quick)
	count := map[time.Duration]int{}
	var phases []time.Duration
	nonDefault := false
	for _, r := range results {
		sc, ok := defaults[r.Scenario]
		ph, _ := runPhase(r)
		if !ok || sc.kind != "paced" || ph == 0 {
			continue
		}
		if count[ph] == 0 {
			phases = append(phases, ph)
		}
		count[ph]++
		if ph != sc.phase {
			nonDefault = true
		}
	}
	switch {
	case !nonDefault:
		return 0, ""
	case len(phases) == 1:
		return phases[0], ""
	}
	sort.Slice(phases, func(i, j int) bool { return phases[i] < phases[j] })
	var parts []string
	for _, ph := range phases {
		parts = append(parts, fmt.Sprintf("%s (%d runs)", ph, count[ph]))
	}
	return 0, "The merged paced runs differ in their enqueue phase: " + strings.Join(parts, ", ") + "; each scenario's section gives its runs' phases."
}

func runOne(ctx context.Context, e *env, sc scenario, sys system, run int, quick bool) *runResult {
	res := &runResult{
		Scenario: sc.name, System: sys.name(), Run: run, Started: time.Now(), Quick: quick,
		Metrics: map[string]num{}, LoadBefore: loadAvg(),
		Params: map[string]any{
			"desc": sc.desc, "rate_hz": sc.rate, "workers": sys.workersFor(sc.name, sc.workers), "processes": max(sc.procs, 1),
			"work_ms": sc.work.Milliseconds(), "tenants": sc.tenants, "phase_s": sc.phase.Seconds(), "warmup_s": sc.warm.Seconds(),
		},
		WorkersHost: "in-process (figures include the inserting harness)",
		Command:     "go run . " + strings.Join(os.Args[1:], " "),
	}
	if sys.shared() {
		res.WorkersHost = "child process(es); inserts from the harness"
	}
	defer func() {
		res.DurationS = time.Since(res.Started).Seconds()
		res.LoadAfter = loadAvg()
	}()
	// Short enough for River (at most 46 characters) and any identifier rule.
	id := fmt.Sprintf("bench_%s_%s_%d", strings.ReplaceAll(sys.name(), "-", "_"), shortName(sc.name), time.Now().UnixNano()%1_000_000)
	if err := sys.create(ctx, e, id); err != nil {
		res.Errors = append(res.Errors, "create: "+err.Error())
		return res
	}
	defer func() {
		if err := sys.drop(context.Background(), e, id); err != nil {
			res.Errors = append(res.Errors, "drop: "+err.Error())
		}
	}()
	inst, err := sys.open(ctx, e, id)
	if err != nil {
		res.Errors = append(res.Errors, "open: "+err.Error())
		return res
	}
	defer inst.close()
	rc := &runCtx{ctx: ctx, e: e, sc: sc, sys: sys, inst: inst, id: id, res: res}
	switch sc.kind {
	case "paced":
		err = runPaced(rc)
	case "drain":
		err = runDrain(rc)
	case "insert":
		err = runInsert(rc)
	case "roundtrip":
		err = runRoundTrip(rc)
	case "wal":
		err = runWAL(rc)
	case "modes":
		err = runModes(rc)
	case "flood":
		err = runFlood(rc)
	}
	if err != nil {
		res.Errors = append(res.Errors, err.Error())
	}
	return res
}

func shortName(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(part[:min(3, len(part))])
		}
	}
	return b.String()
}

func summary(r *runResult) string {
	if len(r.Errors) > 0 {
		return "ERROR: " + strings.Join(r.Errors, "; ")
	}
	var parts []string
	for _, k := range []string{"pickup_p95_ms", "completions_per_s", "efficiency", "drain_jobs_per_s", "insert_single_per_s",
		"insert_batch1000_per_s", "staged_jobs_per_s", "atomic_jobs_per_s", "recovery_s", "jobs_lost", "wal_bytes_per_job_batch1", "rss_max_mb", "goroutines_max"} {
		if v, ok := r.Metrics[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%s", k, fmtNum(float64(v))))
		}
	}
	return strings.Join(parts, " ")
}

func machine(ctx context.Context, url string) (machineInfo, error) {
	mi := machineInfo{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := exec.Command("uname", "-r").Output(); err == nil {
		mi.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				mi.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			mi.MemoryMB = kb / 1024
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return mi, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(cctx, "SHOW server_version").Scan(&mi.PostgreSQL); err != nil {
		return mi, err
	}
	var sb, sc, mc string
	_ = conn.QueryRow(cctx, "SELECT current_setting('shared_buffers'), current_setting('synchronous_commit'), current_setting('max_connections')").Scan(&sb, &sc, &mc)
	mi.PGSettings = fmt.Sprintf("shared_buffers=%s synchronous_commit=%s max_connections=%s", sb, sc, mc)
	return mi, nil
}

func redact(url string) string {
	if i := strings.Index(url, "@"); i > 0 {
		if j := strings.Index(url, "://"); j > 0 && j < i {
			return url[:j+3] + "…" + url[i:]
		}
	}
	return url
}
