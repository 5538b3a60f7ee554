package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// childEnv names the environment variable that turns the bench binary into a worker process.
const childEnv = "PRONTO_BENCH_CHILD"

// listSystemsEnv, when set, makes a worker binary print the systems it holds, one per line, and exit
// (TestWorkerBinaries).
const listSystemsEnv = "PRONTO_BENCH_WORKER_SYSTEMS"

// profileEnv, when set to a directory, makes every worker process write a CPU profile there.
const profileEnv = "BENCH_CPU_PROFILE_DIR"

// childConfig is what a worker process is told.
type childConfig struct {
	System     string `json:"system"`
	DBURL      string `json:"db_url"`
	ID         string `json:"id"`
	Workers    int    `json:"workers"`
	EmitStarts bool   `json:"emit_starts"`
}

// ---- the child side ----

// lineWriter writes protocol lines to stdout, flushed every few milliseconds (timestamps travel in the
// lines, so buffering does not change any figure).
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	fmt.Fprintf(l.w, format, args...)
	l.mu.Unlock()
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	_ = l.w.Flush()
	l.mu.Unlock()
}

type childSink struct {
	w      *lineWriter
	starts bool
}

func (s childSink) start(seq int64, attempt int, startNs int64) {
	if s.starts {
		// Flushed at once: the process may be SIGKILLed while this job runs.
		s.w.mu.Lock()
		fmt.Fprintf(s.w.w, "S %d %d %d\n", seq, attempt, startNs)
		_ = s.w.w.Flush()
		s.w.mu.Unlock()
	}
}

func (s childSink) end(a benchArgs, attempt int, startNs, endNs int64, ok bool) {
	o := 0
	if ok {
		o = 1
	}
	if !s.starts {
		s.w.printf("E %d %d %d %d %d %d %d\n", a.Seq, attempt, startNs, endNs, o, a.Tenant, a.Ins)
		return
	}
	// Crash scenario: flushed at once, or a SIGKILL could hide an end whose outcome reached the database.
	s.w.mu.Lock()
	fmt.Fprintf(s.w.w, "E %d %d %d %d %d %d %d\n", a.Seq, attempt, startNs, endNs, o, a.Tenant, a.Ins)
	_ = s.w.w.Flush()
	s.w.mu.Unlock()
}

// runChild works jobs until its standard input closes, then stops gracefully and exits.
func runChild(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench child: bad config:", err)
		return 2
	}
	sys, ok := systemsByName()[cfg.System]
	if !ok {
		fmt.Fprintln(os.Stderr, "bench child: unknown system", cfg.System)
		return 2
	}
	ctx := context.Background()
	inst, err := sys.open(ctx, &env{dbURL: cfg.DBURL}, cfg.ID)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child: open:", err)
		return 1
	}
	w := &lineWriter{w: bufio.NewWriterSize(os.Stdout, 1<<16)}
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	goHarness(func() {
		defer close(flushed)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopFlush:
				w.flush()
				return
			case <-t.C:
				w.flush()
			}
		}
	})
	if dir := os.Getenv(profileEnv); dir != "" {
		// A CPU profile of this worker process, for finding where a system's CPU goes (never on by default).
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s_%s_%d.cpu.pprof", cfg.System, cfg.ID, os.Getpid())))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() {
				pprof.StopCPUProfile()
				_ = f.Close()
			}()
		}
	}
	stop, err := inst.startWorkers(ctx, cfg.Workers, childSink{w: w, starts: cfg.EmitStarts})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child: start workers:", err)
		return 1
	}
	w.printf("R %d\n", time.Now().UnixNano())
	w.flush()
	stopG := make(chan struct{})
	goHarness(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			// Less the harness's goroutines and main (blocked reading stdin).
			w.printf("G %d\n", int64(runtime.NumGoroutine())-harnessGoroutines.Load()-1)
			select {
			case <-stopG:
				return
			case <-t.C:
			}
		}
	})
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(stopG)
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	if err := stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench child: stop:", err)
	}
	cancel()
	close(stopFlush)
	<-flushed
	inst.close()
	return 0
}

// harnessGoroutines counts the goroutines the harness itself runs in this process (pacer, inserters,
// samplers, readers), so that in-process figures can be reported for the system alone.
var harnessGoroutines atomic.Int64

func goHarness(f func()) {
	harnessGoroutines.Add(1)
	go func() {
		defer harnessGoroutines.Add(-1)
		f()
	}()
}
