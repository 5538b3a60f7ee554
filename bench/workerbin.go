//go:build !benchworker

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Worker binaries. The systems whose workers run in child processes (PostgreSQL, Redis, several
// processes on one SQLite file) get a binary of their own family, built from this folder with the
// tags benchworker and the family's (worker.go): pronto on PostgreSQL holds pronto and its
// PostgreSQL store, River holds River, and so on, as a user's worker binary would. Run from the
// harness binary instead, every worker process mapped 38 MB of code and data for the harness, the
// report's plotting and every other system, and its RSS counted the pages of them it touched (the
// pronto worker's RSS at 100 workers was 19 MB of file pages and 9 MB of its own). --single-binary
// keeps the old way.

// workerFamilies maps a system to the build tag of its worker binary.
var workerFamilies = map[string]string{
	"pronto": "bw_pronto", "pronto-unlogged": "bw_pronto", "pronto-2000w": "bw_pronto", "pronto-noprefetch": "bw_pronto", "pronto-remove": "bw_pronto", "pronto-nohandoff": "bw_pronto",
	"river": "bw_river", "river-tuned": "bw_river",
	"sql-limit": "bw_sql", "sql-pickup": "bw_sql",
	// pronto on Redis, and pronto on a store that cannot LISTEN woken through Redis.
	"pronto-redis": "bw_extra", "pronto-redis-remove": "bw_extra", "pronto-sqlite-procs": "bw_extra", "pronto-sqlite-redisnotify": "bw_extra",
	"pronto-nolisten": "bw_extra", "pronto-nolisten-redisnotify": "bw_extra",
}

// workerBins builds each family's binary once per invocation, into dir.
type workerBins struct {
	dir    string
	single bool

	mu    sync.Mutex
	built map[string]string
}

// workerBinaries is this invocation's (set up by run).
var workerBinaries = &workerBins{single: true}

// describe says which binaries the worker processes run, for the report.
func (w *workerBins) describe() string {
	if w.single {
		return "the harness binary (--single-binary)"
	}
	return "a binary per system family (bench/worker.go)"
}

// exe returns the binary that runs system's worker processes, building it on first use.
func (w *workerBins) exe(system string) (string, error) {
	if w.single {
		return os.Executable()
	}
	tag, ok := workerFamilies[system]
	if !ok {
		return "", fmt.Errorf("no worker binary family for system %q", system)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.built[tag]; ok {
		return p, nil
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("worker binary %s: this binary does not know its source folder (use --single-binary)", tag)
	}
	src := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(src, "worker.go")); err != nil {
		return "", fmt.Errorf("worker binary %s: source folder %s not found (built elsewhere? use --single-binary): %w", tag, src, err)
	}
	out := filepath.Join(w.dir, "worker-"+tag)
	cmd := exec.Command("go", "build", "-tags", "benchworker,"+tag, "-o", out, ".")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("worker binary %s: go build: %v\n%s", tag, err, b)
	}
	if w.built == nil {
		w.built = map[string]string{}
	}
	w.built[tag] = out
	return out, nil
}
