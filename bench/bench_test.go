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
		}
		ks = append(ks, k)
	}
	return ks
}
