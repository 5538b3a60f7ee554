//go:build !benchworker

package main

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ev is one thing a worker did: a start (kind 'S', only in scenarios that need it) or an attempt's end.
type ev struct {
	seq, ins, start, end int64
	attempt              int32
	tenant               int16
	proc                 int16
	ok                   bool
	kind                 byte
}

// recorder collects events from in-process workers and from child processes.
type recorder struct {
	maxAttempts int
	emitStarts  bool
	// countOnly keeps the counters below and no event: a scenario that reads only the counters
	// (round_trip_max) would otherwise hold millions of events in the harness, and an in-process
	// system's RSS, measured in the harness's process, would count them (48 bytes each, and the
	// slice's doubling on top).
	countOnly bool

	mu  sync.Mutex
	evs []ev

	inflight [8]atomic.Int64 // per worker process: started and not ended (when starts are emitted)

	okEnds   atomic.Int64 // attempts that succeeded
	terminal atomic.Int64 // jobs that reached an outcome (succeeded, or failed on their last attempt)
	lastEnd  atomic.Int64
}

func newRecorder(maxAttempts int, emitStarts bool) *recorder {
	if maxAttempts <= 0 {
		maxAttempts = 1 << 30
	}
	return &recorder{maxAttempts: maxAttempts, emitStarts: emitStarts, evs: make([]ev, 0, 1<<14)}
}

// newCounter returns a recorder that keeps only its counters (see countOnly).
func newCounter() *recorder {
	return &recorder{maxAttempts: 1 << 30, countOnly: true}
}

func (r *recorder) add(e ev) {
	if !r.countOnly {
		r.mu.Lock()
		r.evs = append(r.evs, e)
		r.mu.Unlock()
	}
	if r.emitStarts && int(e.proc) < len(r.inflight) {
		if e.kind == 'S' {
			r.inflight[e.proc].Add(1)
		} else {
			r.inflight[e.proc].Add(-1)
		}
	}
	if e.kind != 'E' {
		return
	}
	if e.ok {
		r.okEnds.Add(1)
	}
	if e.ok || int(e.attempt) >= r.maxAttempts {
		r.terminal.Add(1)
	}
	for {
		cur := r.lastEnd.Load()
		if e.end <= cur || r.lastEnd.CompareAndSwap(cur, e.end) {
			break
		}
	}
}

func (r *recorder) events() []ev {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ev(nil), r.evs...)
}

// localSink records in-process workers' events.
type localSink struct{ r *recorder }

func (s localSink) start(seq int64, attempt int, startNs int64) {
	if s.r.emitStarts {
		s.r.add(ev{kind: 'S', seq: seq, attempt: int32(attempt), start: startNs})
	}
}

func (s localSink) end(a benchArgs, attempt int, startNs, endNs int64, ok bool) {
	s.r.add(ev{kind: 'E', seq: a.Seq, ins: a.Ins, start: startNs, end: endNs, attempt: int32(attempt), tenant: int16(a.Tenant), ok: ok})
}

// ---- percentiles ----

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	if len(sorted) == 1 {
		return sorted[0]
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	frac := rank - float64(lo)
	return sorted[lo]*(1-frac) + sorted[hi]*frac
}

func sortedCopy(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s
}

func median(xs []float64) float64 {
	var clean []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			clean = append(clean, x)
		}
	}
	return percentile(sortedCopy(clean), 50)
}

// ---- process statistics ----

// rssOf reads VmRSS (bytes) of a process from /proc ("self" for this one).
func rssOf(pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line)
			if len(fields) >= 2 {
				kb, _ := strconv.ParseInt(fields[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// cpuSelf is this process's user+system CPU time.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return rusageCPU(&ru)
}

func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfSampler samples this process's goroutines (less the harness's own) and RSS.
type selfSampler struct {
	base     int
	maxG     atomic.Int64
	maxRSS   atomic.Int64
	stop     chan struct{}
	done     chan struct{}
	cpuStart time.Duration
}

func startSelfSampler(base int) *selfSampler {
	s := &selfSampler{base: base, stop: make(chan struct{}), done: make(chan struct{}), cpuStart: cpuSelf()}
	goHarness(func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *selfSampler) sample() {
	g := int64(runtime.NumGoroutine()) - harnessGoroutines.Load() - int64(s.base)
	if g > s.maxG.Load() {
		s.maxG.Store(g)
	}
	if r := rssOf("self"); r > s.maxRSS.Load() {
		s.maxRSS.Store(r)
	}
}

// finish stops sampling and returns max goroutines, max RSS bytes and CPU seconds used since start.
func (s *selfSampler) finish() (int64, int64, float64) {
	close(s.stop)
	<-s.done
	return s.maxG.Load(), s.maxRSS.Load(), (cpuSelf() - s.cpuStart).Seconds()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return strings.TrimSpace(string(b))
}

// profileInto starts a CPU profile of this process into f, which stop ends and closes (f is closed
// at once when the profile cannot start).
func profileInto(f *os.File) (stop func(), err error) {
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
