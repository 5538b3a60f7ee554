//go:build !benchworker

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// isolatedEnv names the environment variable that turns the bench binary into a process running one
// run of a system whose workers live inside the harness (pronto-sqlite, pronto-memory).
//
// Those systems are measured from inside the process that runs them: its RSS, goroutines and CPU. Run
// in the harness's own process, each would inherit the heap every earlier run left behind (the Go
// runtime returns freed memory to the operating system slowly, and a store that leaked would stay
// resident for good), so a run's RSS depended on what ran before it: SQLite's round_trip_max read
// 3,945 MB after the memory store's runs and 87 MB alone. Each such run therefore gets a fresh process.
const isolatedEnv = "PRONTO_BENCH_ISOLATED"

// isolatedConfig is what an isolated run is told.
type isolatedConfig struct {
	Scenario string        `json:"scenario"`
	System   string        `json:"system"`
	Run      int           `json:"run"`
	Quick    bool          `json:"quick"`
	Phase    time.Duration `json:"phase"`
	DBURL    string        `json:"db_url"`
	TmpDir   string        `json:"tmp_dir"`
	Out      string        `json:"out"` // where the run writes its result (JSON)
}

// runIsolatedChild runs the one run raw describes and writes its result where it says; it returns the
// process's exit code.
func runIsolatedChild(raw string) int {
	var cfg isolatedConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench isolated run: bad config:", err)
		return 2
	}
	all := scenarios(cfg.Quick)
	applyPhase(all, cfg.Phase)
	sc, ok := all[cfg.Scenario]
	sys, ok2 := systemsByName()[cfg.System]
	if !ok || !ok2 {
		fmt.Fprintf(os.Stderr, "bench isolated run: unknown scenario %q or system %q\n", cfg.Scenario, cfg.System)
		return 2
	}
	res := runOne(context.Background(), &env{dbURL: cfg.DBURL, tmpDir: cfg.TmpDir}, sc, sys, cfg.Run, cfg.Quick)
	b, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(cfg.Out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench isolated run: writing the result:", err)
		return 1
	}
	return 0
}

// runSystem runs one run of sys: in a fresh process of this binary for the systems whose workers run
// inside the harness, in this process for the others (their workers are child processes already).
func runSystem(ctx context.Context, e *env, sc scenario, sys system, run int, o options) *runResult {
	if sys.shared() {
		return runOne(ctx, e, sc, sys, run, o.quick)
	}
	fail := func(err error) *runResult {
		return &runResult{Scenario: sc.name, System: sys.name(), Run: run, Started: time.Now(), Quick: o.quick,
			Metrics: map[string]num{}, Errors: []string{"isolated run: " + err.Error()}}
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	out := filepath.Join(e.tmpDir, fmt.Sprintf("isolated_%s_%s_%d.json", sc.name, sys.name(), run))
	raw, err := json.Marshal(isolatedConfig{Scenario: sc.name, System: sys.name(), Run: run, Quick: o.quick,
		Phase: o.phase, DBURL: e.dbURL, TmpDir: e.tmpDir, Out: out})
	if err != nil {
		return fail(err)
	}
	cmd := exec.CommandContext(ctx, exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), isolatedEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fail(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return fail(err)
	}
	_ = os.Remove(out)
	var res runResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fail(err)
	}
	res.WorkersHost = strings.TrimSuffix(res.WorkersHost, ")") + "; a fresh process for this run)"
	return &res
}
