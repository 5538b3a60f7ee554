//go:build !benchworker

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// scenario is one workload.
type scenario struct {
	name        string
	kind        string // paced, drain, insert, roundtrip, wal, modes
	desc        string
	rate        float64 // inserts per second
	workers     int     // per process
	procs       int     // worker processes (PostgreSQL systems); 0 means 1
	work        time.Duration
	tenants     int
	noisy       bool // one tenant sends 90%
	burstRate   float64
	burstAt     time.Duration
	burstFor    time.Duration
	failPct     int
	maxAttempts int
	killAt      time.Duration // crash_recovery
	saturated   bool
	latency     bool // pickup CDF plot
	fairness    bool
	inproc      bool // also run pronto on SQLite and memory
	phase       time.Duration
	warm        time.Duration
	tail        time.Duration // longest wait for outcomes after the enqueue phase
	backlog     int           // drain, modes
	walJobs     int           // wal
}

// capacity is jobs/s the workers can complete when saturated.
func (s scenario) capacity(workers int) float64 {
	if s.work <= 0 {
		return math.Inf(1)
	}
	return float64(workers) / s.work.Seconds()
}

var scenarioOrder = []string{
	"notify_latency", "steady_under", "steady_balanced", "steady_over", "burst", "noisy_neighbor",
	"noisy_neighbor_saturated", "rate_limit_pressure", "high_scale", "multi_process", "crash_recovery",
	"drain", "insert", "round_trip_max", "wal", "processing_modes", "tenant_flood",
}

// headlineScenarios get the most runs when time is short.
var headlineScenarios = []string{"notify_latency", "high_scale", "drain", "insert", "crash_recovery", "steady_over"}

func scenarios(quick bool) map[string]scenario {
	ms := time.Millisecond
	phase, warm := 30*time.Second, time.Second
	if quick {
		phase, warm = 2*time.Second, 200*ms
	}
	// t scales a full-run duration down for quick mode.
	t := func(full, q time.Duration) time.Duration {
		if quick {
			return q
		}
		return full
	}
	n := func(full, q int) int {
		if quick {
			return q
		}
		return full
	}
	list := []scenario{
		{name: "notify_latency", kind: "paced", rate: 20, workers: 10, tenants: 1, latency: true, inproc: true,
			desc: "20 Hz, 10 workers, no work: pickup latency when idle", tail: t(5*time.Second, 2*time.Second)},
		{name: "steady_under", kind: "paced", rate: 30, workers: 20, work: 10 * ms, tenants: 1, latency: true,
			desc: "30 Hz, 20 workers, 10 ms work: under capacity", tail: t(5*time.Second, 2*time.Second)},
		{name: "steady_balanced", kind: "paced", rate: 40, workers: 10, work: 250 * ms, tenants: 1, latency: true, saturated: true,
			desc: "40 Hz, 10 workers, 250 ms work: exactly at capacity (40/s)", tail: t(20*time.Second, 1*time.Second)},
		{name: "steady_over", kind: "paced", rate: 50, workers: 10, work: 400 * ms, tenants: 1, saturated: true, inproc: true,
			desc: "50 Hz, 10 workers, 400 ms work: twice the capacity (25/s)", tail: t(40*time.Second, 1*time.Second)},
		{name: "burst", kind: "paced", rate: 50, workers: 10, work: 200 * ms, tenants: 1, saturated: true,
			burstRate: 500, burstAt: t(10*time.Second, 600*ms), burstFor: t(5*time.Second, 300*ms),
			desc: "50 Hz plus 500 Hz for 5 s at t=10 s, 10 workers, 200 ms work (capacity 50/s)", tail: t(60*time.Second, 1*time.Second)},
		{name: "noisy_neighbor", kind: "paced", rate: 50, workers: 20, work: 10 * ms, tenants: 10, noisy: true, latency: true, fairness: true,
			desc: "50 Hz, 20 workers, 10 ms work, 10 tenants, one sends 90%", tail: t(5*time.Second, 2*time.Second)},
		{name: "noisy_neighbor_saturated", kind: "paced", rate: 100, workers: 10, work: 200 * ms, tenants: 10, noisy: true, saturated: true, fairness: true,
			desc: "100 Hz, 10 workers, 200 ms work (capacity 50/s), 10 tenants, one sends 90%", tail: t(40*time.Second, 1*time.Second)},
		{name: "rate_limit_pressure", kind: "paced", rate: 50, workers: 10, work: 10 * ms, tenants: 1, failPct: 30, maxAttempts: 3,
			desc: "50 Hz, 10 workers, 10 ms work, 30% of attempts fail (simulated 429), 3 attempts at most", tail: t(30*time.Second, 3*time.Second)},
		{name: "high_scale", kind: "paced", rate: 300, workers: 100, work: 10 * ms, tenants: 10, latency: true, inproc: true,
			desc: "300 Hz, 100 workers, 10 ms work, 10 tenants", tail: t(5*time.Second, 2*time.Second)},
		{name: "multi_process", kind: "paced", rate: 200, workers: 10, procs: 4, work: 10 * ms, tenants: 1, latency: true,
			desc: "200 Hz, 4 processes x 10 workers, 10 ms work", tail: t(5*time.Second, 2*time.Second)},
		{name: "crash_recovery", kind: "paced", rate: 100, workers: 10, procs: 2, work: 50 * ms, tenants: 1,
			killAt: t(10*time.Second, 1*time.Second), phase: t(30*time.Second, 3*time.Second),
			desc: "100 Hz, 2 processes x 10 workers, 50 ms work, one process SIGKILLed at t=10 s", tail: t(15*time.Second, 5*time.Second)},
		{name: "drain", kind: "drain", workers: 100, backlog: n(100000, 5000), inproc: true,
			desc: "a backlog of 100k jobs (no work) worked by 100 workers (River tuned: 2000)", tail: t(180*time.Second, 20*time.Second)},
		{name: "insert", kind: "insert", inproc: true, phase: t(5*time.Second, 700*ms),
			desc: "inserts with no workers: single jobs, batches of 100, batches of 1000 (one caller, back to back)"},
		{name: "round_trip_max", kind: "roundtrip", workers: 100, inproc: true, phase: t(10*time.Second, 1500*ms),
			desc: "insert (batches of 100, 2 callers, at most 5000 outstanding) and work (100 workers, no work) together, as fast as possible"},
		{name: "wal", kind: "wal", workers: 10, walJobs: n(2000, 200),
			desc: "PostgreSQL WAL bytes per job through its whole life (insert, claim, complete), inserted in batches of 1 and of 10"},
		{name: "processing_modes", kind: "modes", workers: 10, backlog: n(5000, 300), tail: t(300*time.Second, 60*time.Second),
			desc: fmt.Sprintf("a backlog of %d jobs worked by 10 workers, each job writing one row to an application table: "+
				"staged (the row commits, then the job's outcome in a second transaction) and atomic (the row and the job's completion in one "+
				"transaction: pronto.CompleteTx, river.JobCompleteTx); each mode drains in a fresh schema, then the harness checks one row per job and every job completed",
				n(5000, 300))},
		{name: "tenant_flood", kind: "flood", rate: 20, workers: 100, backlog: n(100000, 10000),
			phase: t(20*time.Second, 5*time.Second), tail: t(300*time.Second, 60*time.Second),
			desc: fmt.Sprintf("one queue, 100 workers, no work: %d jobs without a tenant inserted at once and drained (the plain drain, in a fresh "+
				"schema of its own); then, in another fresh schema, tenant B inserts 20 jobs/s alone (B's idle pickup), then tenant A inserts %d jobs at once "+
				"while B keeps inserting 20 jobs/s: B's pickup while A drains, and A's drain rate against the plain drain. pronto stores the tenants "+
				"(fair claims); River has none (FIFO)",
				n(100000, 10000), n(100000, 10000))},
	}
	out := map[string]scenario{}
	for _, s := range list {
		if quick && s.inproc && s.name != "notify_latency" && s.name != "drain" && s.name != "insert" {
			s.inproc = false // keep CI's quick run short; the full run covers SQLite and memory
		}
		if s.phase == 0 {
			s.phase = phase
		}
		s.warm = warm
		out[s.name] = s
	}
	return out
}

// tenantOf assigns a job to a tenant deterministically, so every system sees the same sequence.
func tenantOf(sc scenario, seq int64) int {
	if sc.tenants <= 1 {
		return 0
	}
	if !sc.noisy {
		return int(seq % int64(sc.tenants))
	}
	x := uint64(seq)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	if x%1000 < 900 {
		return 0
	}
	return 1 + int(x%(uint64(sc.tenants)-1))
}

// schedule returns insert offsets from the start of warm-up.
func schedule(sc scenario) []time.Duration {
	var out []time.Duration
	total := sc.warm + sc.phase
	step := time.Duration(float64(time.Second) / sc.rate)
	for at := time.Duration(0); at < total; at += step {
		out = append(out, at)
	}
	if sc.burstRate > 0 {
		bstep := time.Duration(float64(time.Second) / sc.burstRate)
		from := sc.warm + sc.burstAt
		for at := from; at < from+sc.burstFor; at += bstep {
			out = append(out, at)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	}
	return out
}

// runCtx is everything one run needs.
type runCtx struct {
	ctx  context.Context
	e    *env
	sc   scenario
	sys  system
	inst instance
	id   string
	res  *runResult
}

func (rc *runCtx) startHost(workers, procs int, rec *recorder) (host, error) {
	if !rc.sys.shared() {
		return startLocalHost(rc.ctx, rc.inst, workers*max(procs, 1), rec)
	}
	return startChildHost(childConfig{System: rc.sys.name(), DBURL: rc.e.dbURL, ID: rc.id, Workers: workers, EmitStarts: rec.emitStarts}, max(procs, 1), rec)
}

// ---- paced scenarios ----

func runPaced(rc *runCtx) error {
	sc := rc.sc
	rec := newRecorder(sc.maxAttempts, sc.killAt > 0)
	workers := rc.sys.workersFor(sc.name, sc.workers)
	h, err := rc.startHost(workers, sc.procs, rec)
	if err != nil {
		return err
	}
	if _, err := h.readyAt(30 * time.Second); err != nil {
		h.stop()
		return err
	}
	offsets := schedule(sc)
	type item struct {
		seq int64
		due time.Time
	}
	ch := make(chan item, len(offsets)+1)
	var inserted, insertErrs atomic.Int64
	lags := make([]float64, len(offsets))
	// insStart and insEnd are when each insert call began and returned (UnixNano; 0 for an insert
	// that failed): insEnd for the split of pickup into the insert call and what follows it,
	// insStart for the jobs that never started.
	insStart := make([]int64, len(offsets))
	insEnd := make([]int64, len(offsets))
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		goHarness(func() {
			defer wg.Done()
			for it := range ch {
				now := time.Now()
				a := benchArgs{Seq: it.seq, Ins: now.UnixNano(), Tenant: tenantOf(sc, it.seq), WorkUs: sc.work.Microseconds(), FailPct: sc.failPct}
				lags[it.seq] = float64(now.Sub(it.due)) / 1e6
				if err := rc.inst.insert(rc.ctx, a, sc.maxAttempts); err != nil {
					insertErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				insStart[it.seq] = a.Ins
				insEnd[it.seq] = time.Now().UnixNano()
				inserted.Add(1)
			}
		})
	}
	start := time.Now()
	t0 := start.Add(sc.warm)
	t1 := t0.Add(sc.phase)
	var killNs int64
	killedProc := -1
	killed := sc.killAt <= 0
	for i, off := range offsets {
		due := start.Add(off)
		if !killed && due.After(t0.Add(sc.killAt)) {
			time.Sleep(time.Until(t0.Add(sc.killAt)))
			// Kill the worker process running the most jobs, so the kill interrupts work (waiting up to
			// a second for one to be running any: River works in bursts, one per fetch).
			for wait := time.Now().Add(time.Second); time.Now().Before(wait); time.Sleep(time.Millisecond) {
				if rec.inflight[0].Load()+rec.inflight[1].Load() > 0 {
					break
				}
			}
			killedProc = 0
			for p := 1; p < max(sc.procs, 1); p++ {
				if rec.inflight[p].Load() > rec.inflight[killedProc].Load() {
					killedProc = p
				}
			}
			killNs = h.kill(killedProc)
			killed = true
		}
		time.Sleep(time.Until(due))
		ch <- item{seq: int64(i), due: due}
	}
	close(ch)
	wg.Wait()
	time.Sleep(time.Until(t1))
	total := inserted.Load()
	deadline := time.Now().Add(sc.tail)
	for time.Now().Before(deadline) && rec.terminal.Load() < total {
		time.Sleep(20 * time.Millisecond)
	}
	allDone := rec.terminal.Load() >= total
	// The end of the run: a job not started by now waited at least until now.
	end := time.Now()
	g, rss, cpu := h.stop()
	res := rc.res
	res.set("jobs_inserted", float64(total))
	res.set("insert_errors", float64(insertErrs.Load()))
	if v := firstErr.Load(); v != nil {
		res.Errors = append(res.Errors, "insert: "+v.(string))
	}
	res.set("insert_lag_p99_ms", percentile(sortedCopy(lags), 99))
	res.set("goroutines_max", float64(g))
	res.set("rss_max_mb", float64(rss)/(1<<20))
	res.set("cpu_s", cpu)
	analyzePaced(rc, rec, t0, t1, end, killNs, killedProc, allDone, workers, insStart, insEnd)
	return nil
}

// analyzePaced turns a paced run's events into its figures. end is when the run stopped waiting for
// jobs; insStart and insEnd are when each job's insert call began and returned (0: not inserted).
func analyzePaced(rc *runCtx, rec *recorder, t0, t1, end time.Time, killNs int64, killedProc int, allDone bool, workers int, insStart, insEnd []int64) {
	kp := int16(killedProc)
	sc, res := rc.sc, rc.res
	evs := rec.events()
	t0n, t1n := t0.UnixNano(), t1.UnixNano()
	type jobInfo struct {
		ins, firstStart int64
		tenant          int
		starts, okEnds  int
	}
	jobs := map[int64]*jobInfo{}
	get := func(seq int64) *jobInfo {
		j := jobs[seq]
		if j == nil {
			j = &jobInfo{firstStart: math.MaxInt64}
			jobs[seq] = j
		}
		return j
	}
	var inWindow, okTotal, failedAttempts, discarded int
	var lastOutcome int64
	startsOnKilled := map[int64]bool{}
	endsOnKilled := map[int64]bool{}
	restart := map[int64]int64{}
	for _, e := range evs {
		j := get(e.seq)
		if e.kind == 'S' {
			if e.proc == kp && killNs > 0 && e.start < killNs {
				startsOnKilled[e.seq] = true
			}
			if killNs > 0 && e.start >= killNs && e.proc != kp {
				if r, ok := restart[e.seq]; !ok || e.start < r {
					restart[e.seq] = e.start
				}
			}
			j.starts++
			if e.start < j.firstStart {
				j.firstStart = e.start
			}
			continue
		}
		if !rec.emitStarts {
			j.starts++
		}
		if e.proc == kp && killNs > 0 {
			endsOnKilled[e.seq] = true
		}
		if e.start < j.firstStart {
			j.firstStart = e.start
		}
		if e.ins != 0 {
			j.ins = e.ins
			j.tenant = int(e.tenant)
		}
		if e.ok {
			okTotal++
			j.okEnds++
			if e.end >= t0n && e.end <= t1n {
				inWindow++
			}
		} else {
			failedAttempts++
			if int(e.attempt) >= rec.maxAttempts {
				discarded++
			}
		}
		if e.ok || int(e.attempt) >= rec.maxAttempts {
			if e.end > lastOutcome {
				lastOutcome = e.end
			}
		}
	}
	window := t1.Sub(t0).Seconds()
	res.set("completed", float64(inWindow))
	res.set("completions_per_s", float64(inWindow)/window)
	res.set("completed_total", float64(okTotal))
	// Pickup: first start minus insert start, for jobs inserted inside the measured window.
	var pick []float64
	perTenant := map[int][]float64{}
	for _, j := range jobs {
		if j.ins < t0n || j.ins > t1n || j.firstStart == math.MaxInt64 {
			continue
		}
		ms := float64(j.firstStart-j.ins) / 1e6
		pick = append(pick, ms)
		perTenant[j.tenant] = append(perTenant[j.tenant], ms)
	}
	// A job inserted inside the window that never started by the end of the run waited at least
	// until then: it counts with that wait (censored), so a system that falls behind cannot show the
	// pickups of only the jobs it got to. The percentiles are then lower bounds of the true ones.
	var neverStarted int
	for seq, ins := range insStart {
		if ins < t0n || ins > t1n || insEnd[seq] == 0 {
			continue
		}
		if j := jobs[int64(seq)]; j != nil && j.firstStart != math.MaxInt64 {
			continue
		}
		neverStarted++
		ms := float64(max(end.UnixNano(), t1n)-ins) / 1e6
		pick = append(pick, ms)
		t := tenantOf(sc, int64(seq))
		perTenant[t] = append(perTenant[t], ms)
	}
	res.set("pickup_never_started", float64(neverStarted))
	if neverStarted > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d job(s) inserted in the measured window never started by the end of the run; each counts in the pickup percentiles with its wait until then (run end − insert), so they are lower bounds", neverStarted))
	}
	sp := sortedCopy(pick)
	res.set("pickup_p50_ms", percentile(sp, 50))
	res.set("pickup_p95_ms", percentile(sp, 95))
	res.set("pickup_p99_ms", percentile(sp, 99))
	// The same pickups split at the moment the insert call returned: the insert (to its commit and
	// back) and the rest (notification, claim, hand-off to a worker; negative when the worker started
	// before the inserting client saw its commit).
	var call, after []float64
	for seq, j := range jobs {
		if j.ins < t0n || j.ins > t1n || j.firstStart == math.MaxInt64 || seq < 0 || seq >= int64(len(insEnd)) || insEnd[seq] == 0 {
			continue
		}
		call = append(call, float64(insEnd[seq]-j.ins)/1e6)
		after = append(after, float64(j.firstStart-insEnd[seq])/1e6)
	}
	if len(call) > 0 {
		sc, sa := sortedCopy(call), sortedCopy(after)
		res.set("insert_call_p50_ms", percentile(sc, 50))
		res.set("insert_call_p95_ms", percentile(sc, 95))
		res.set("after_insert_p50_ms", percentile(sa, 50))
		res.set("after_insert_p95_ms", percentile(sa, 95))
	}
	res.set("pickup_max_ms", percentile(sp, 100))
	res.PickupMs = sampleSorted(sp, 4000)
	if sc.saturated {
		res.set("efficiency", float64(inWindow)/window/sc.capacity(workers*max(sc.procs, 1)))
		if allDone && lastOutcome > 0 {
			res.set("drain_time_s", float64(lastOutcome-t1n)/1e9)
		} else {
			res.set("drain_time_s", math.NaN())
			res.Notes = append(res.Notes, fmt.Sprintf("backlog not drained within %s after the enqueue phase", sc.tail))
		}
	}
	if sc.fairness {
		res.Tenants = map[string]float64{}
		var quiet []float64
		for t, xs := range perTenant {
			res.Tenants[strconv.Itoa(t)] = percentile(sortedCopy(xs), 95)
			if t != 0 {
				quiet = append(quiet, xs...)
			}
		}
		noisy := percentile(sortedCopy(perTenant[0]), 95)
		q := percentile(sortedCopy(quiet), 95)
		res.set("noisy_tenant_p95_ms", noisy)
		res.set("quiet_tenants_p95_ms", q)
		res.set("fairness_ratio", noisy/q)
	}
	if sc.failPct > 0 {
		var completedJobs int
		for _, j := range jobs {
			if j.okEnds > 0 {
				completedJobs++
			}
		}
		res.set("jobs_completed", float64(completedJobs))
		res.set("attempts_failed", float64(failedAttempts))
		res.set("jobs_discarded", float64(discarded))
		res.set("jobs_unfinished", res.get("jobs_inserted")-float64(completedJobs)-float64(discarded))
	}
	if sc.procs > 1 || sc.killAt > 0 {
		var reruns, dupCompletions int
		for _, j := range jobs {
			if j.starts > 1 {
				reruns += j.starts - 1
			}
			if j.okEnds > 1 {
				dupCompletions += j.okEnds - 1
			}
		}
		res.set("reruns", float64(reruns))
		res.set("duplicate_completions", float64(dupCompletions))
	}
	if sc.killAt > 0 {
		var lost int
		for seq := int64(0); seq < int64(res.get("jobs_inserted")); seq++ {
			if j := jobs[seq]; j == nil || j.okEnds == 0 {
				lost++
			}
		}
		res.set("jobs_lost", float64(lost))
		var orphans, notRerun int
		var worst int64
		for seq := range startsOnKilled {
			if endsOnKilled[seq] {
				continue
			}
			orphans++
			r, ok := restart[seq]
			if !ok {
				notRerun++
				continue
			}
			if r-killNs > worst {
				worst = r - killNs
			}
		}
		res.set("orphaned_jobs", float64(orphans))
		res.set("orphans_not_rerun", float64(notRerun))
		if notRerun > 0 || orphans == 0 {
			res.set("recovery_s", math.NaN())
			if notRerun > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("%d of the killed process's %d running jobs did not run again within %s of the kill",
					notRerun, orphans, time.Duration(t1n-killNs)+rc.sc.tail))
			}
		} else {
			res.set("recovery_s", float64(worst)/1e9)
		}
	}
}

// sampleSorted keeps at most n evenly spaced values of a sorted slice (for CDF plots).
func sampleSorted(s []float64, n int) []float64 {
	if len(s) <= n {
		return s
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = s[i*(len(s)-1)/(n-1)]
	}
	return out
}

// ---- drain ----

func runDrain(rc *runCtx) error {
	sc := rc.sc
	rec := newRecorder(0, false)
	now := time.Now().UnixNano()
	const batch = 5000
	for off := 0; off < sc.backlog; off += batch {
		k := min(batch, sc.backlog-off)
		as := make([]benchArgs, k)
		for i := range as {
			as[i] = benchArgs{Seq: int64(off + i), Ins: now}
		}
		if err := rc.inst.bulkLoad(rc.ctx, as); err != nil {
			return fmt.Errorf("loading the backlog: %w", err)
		}
	}
	workers := rc.sys.workersFor(sc.name, sc.workers)
	h, err := rc.startHost(workers, 1, rec)
	if err != nil {
		return err
	}
	ready, err := h.readyAt(30 * time.Second)
	if err != nil {
		h.stop()
		return err
	}
	deadline := time.Now().Add(sc.tail)
	for time.Now().Before(deadline) && rec.okEnds.Load() < int64(sc.backlog) {
		time.Sleep(5 * time.Millisecond)
	}
	// The drain ends when the last outcome is in the database, not when the last worker returns:
	// both systems write outcomes asynchronously, in batches.
	persisted, perr := waitPersisted(rc, int64(sc.backlog), deadline)
	g, rss, cpu := h.stop()
	evs := rec.events()
	first := ready
	var done int
	for _, e := range evs {
		if e.kind == 'E' && e.start < first {
			first = e.start
		}
		if e.kind == 'E' && e.ok {
			done++
		}
	}
	res := rc.res
	last := persisted.UnixNano()
	if perr != nil {
		res.Errors = append(res.Errors, "counting persisted completions: "+perr.Error())
	}
	res.set("jobs_inserted", float64(sc.backlog))
	res.set("completed", float64(done))
	res.set("workers", float64(workers))
	if done >= sc.backlog && perr == nil {
		res.set("drain_s", float64(last-first)/1e9)
		res.set("drain_jobs_per_s", float64(done)/(float64(last-first)/1e9))
	} else {
		el := float64(time.Now().UnixNano()-first) / 1e9
		res.set("drain_s", math.NaN())
		res.set("drain_jobs_per_s", float64(done)/el)
		res.Notes = append(res.Notes, fmt.Sprintf("only %d of %d jobs done within %s; rate over that time", done, sc.backlog, sc.tail))
	}
	res.set("goroutines_max", float64(g))
	res.set("rss_max_mb", float64(rss)/(1<<20))
	res.set("cpu_s", cpu)
	res.set("cpu_us_per_job", cpu*1e6/math.Max(float64(done), 1))
	return nil
}

// waitPersisted polls the count of finished jobs until it reaches n or the deadline passes, and
// returns when it first saw n.
func waitPersisted(rc *runCtx, n int64, deadline time.Time) (time.Time, error) {
	for {
		at := time.Now()
		got, err := rc.inst.finished(rc.ctx)
		if err != nil {
			return at, err
		}
		if got >= n {
			return at, nil
		}
		if at.After(deadline) {
			return at, fmt.Errorf("%d of %d outcomes persisted by the deadline", got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ---- insert ----

func runInsert(rc *runCtx) error {
	sc := rc.sc
	var seq int64
	for _, mode := range []struct {
		name  string
		batch int
	}{{"single", 1}, {"batch100", 100}, {"batch1000", 1000}} {
		start := time.Now()
		var n int
		for time.Since(start) < sc.phase {
			now := time.Now().UnixNano()
			if mode.batch == 1 {
				if err := rc.inst.insert(rc.ctx, benchArgs{Seq: seq, Ins: now}, 0); err != nil {
					return err
				}
			} else {
				as := make([]benchArgs, mode.batch)
				for i := range as {
					as[i] = benchArgs{Seq: seq + int64(i), Ins: now}
				}
				if err := rc.inst.insertMany(rc.ctx, as, 0); err != nil {
					return err
				}
			}
			seq += int64(mode.batch)
			n += mode.batch
		}
		rc.res.set("insert_"+mode.name+"_per_s", float64(n)/time.Since(start).Seconds())
	}
	return nil
}

// ---- round trip ----

func runRoundTrip(rc *runCtx) error {
	sc := rc.sc
	rec := newCounter() // the figures come from the counters alone
	workers := rc.sys.workersFor(sc.name, sc.workers)
	h, err := rc.startHost(workers, 1, rec)
	if err != nil {
		return err
	}
	if _, err := h.readyAt(30 * time.Second); err != nil {
		h.stop()
		return err
	}
	var inserted atomic.Int64
	var seq atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var insErr atomic.Value
	for w := 0; w < 2; w++ {
		wg.Add(1)
		goHarness(func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if inserted.Load()-rec.okEnds.Load() > 5000 {
					time.Sleep(time.Millisecond)
					continue
				}
				now := time.Now().UnixNano()
				as := make([]benchArgs, 100)
				base := seq.Add(100) - 100
				for i := range as {
					as[i] = benchArgs{Seq: base + int64(i), Ins: now}
				}
				if err := rc.inst.insertMany(rc.ctx, as, 0); err != nil {
					insErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				inserted.Add(100)
			}
		})
	}
	time.Sleep(sc.warm)
	// Completions are counted in the database (outcomes persisted), read at both ends of the window;
	// each reading's time is taken as its query begins. Worker ends are reported alongside.
	t0 := time.Now()
	p0, err0 := rc.inst.finished(rc.ctx)
	c0, i0 := rec.okEnds.Load(), inserted.Load()
	time.Sleep(sc.phase)
	t1 := time.Now()
	p1, err1 := rc.inst.finished(rc.ctx)
	c1, i1 := rec.okEnds.Load(), inserted.Load()
	el := t1.Sub(t0).Seconds()
	close(stop)
	wg.Wait()
	g, rss, cpu := h.stop()
	res := rc.res
	if err := errors.Join(err0, err1); err != nil {
		return fmt.Errorf("counting persisted completions: %w", err)
	}
	res.set("completions_per_s", float64(p1-p0)/el)
	res.set("worker_ends_per_s", float64(c1-c0)/el)
	res.set("inserts_per_s", float64(i1-i0)/el)
	res.set("goroutines_max", float64(g))
	res.set("rss_max_mb", float64(rss)/(1<<20))
	res.set("cpu_s", cpu)
	if v := insErr.Load(); v != nil {
		res.Errors = append(res.Errors, "insert: "+v.(string))
	}
	return nil
}

// ---- WAL ----

func runWAL(rc *runCtx) error {
	sc := rc.sc
	p := rc.inst.pool()
	if p == nil {
		return fmt.Errorf("wal needs PostgreSQL")
	}
	rec := newRecorder(0, false)
	h, err := rc.startHost(sc.workers, 1, rec)
	if err != nil {
		return err
	}
	defer h.stop()
	if _, err := h.readyAt(30 * time.Second); err != nil {
		return err
	}
	var seq int64
	var done int64
	for _, b := range []int{1, 10} {
		// Let the previous batch's completions land before the first reading.
		time.Sleep(300 * time.Millisecond)
		var lsn0 string
		if err := p.QueryRow(rc.ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn0); err != nil {
			return err
		}
		for k := 0; k < sc.walJobs; k += b {
			as := make([]benchArgs, b)
			now := time.Now().UnixNano()
			for i := range as {
				as[i] = benchArgs{Seq: seq, Ins: now}
				seq++
			}
			if b == 1 {
				err = rc.inst.insert(rc.ctx, as[0], 0)
			} else {
				err = rc.inst.insertMany(rc.ctx, as, 0)
			}
			if err != nil {
				return err
			}
		}
		done += int64(sc.walJobs)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			n, err := rc.inst.finished(rc.ctx)
			if err != nil {
				return err
			}
			if n >= done {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var bytes float64
		if err := p.QueryRow(rc.ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", lsn0).Scan(&bytes); err != nil {
			return err
		}
		rc.res.set(fmt.Sprintf("wal_bytes_per_job_batch%d", b), bytes/float64(sc.walJobs))
	}
	return nil
}
