//go:build !benchworker

package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
)

// ---- tenant_flood ----
//
// One queue, 100 workers, no work per job, three phases:
//
//  1. plain, in a fresh instance of its own: sc.backlog jobs without a tenant are inserted at once
//     (batches of 5000) and drained: the plain drain rate;
//  2. idle, in the run's fresh instance: tenant B inserts at sc.rate (20/s) for sc.phase into the
//     idle queue: B's pickup p95 on an idle queue;
//  3. flood, in the same instance: tenant A inserts sc.backlog jobs at once while B keeps inserting
//     at sc.rate, until A's jobs are all done: B's pickup p95 while A drains, and A's drain rate.
//
// A system that knows tenants (pronto, which claims in turns across tenants) gets each job's
// tenant; the others (River: FIFO) get the same jobs without one.

// floodMetrics are the figures of tenant_flood's report table, in order.
var floodMetrics = []string{"b_idle_p95_ms", "b_flood_p95_ms", "b_p95_ratio", "b_flood_p50_ms", "b_flood_max_ms",
	"b_flood_insert_p95_ms", "b_flood_p95_loading_ms", "b_flood_p95_loaded_ms",
	"b_flood_jobs", "plain_drain_jobs_per_s", "a_drain_jobs_per_s", "a_drain_vs_plain", "workers"}

func init() {
	for k, v := range map[string]string{
		"b_idle_p95_ms": "B pickup p95 on an idle queue (ms)", "b_flood_p95_ms": "B pickup p95 while A drains (ms)",
		"b_p95_ratio": "B p95 while A drains ÷ idle (target ≤ 2)", "b_flood_p50_ms": "B pickup p50 while A drains (ms)",
		"b_flood_max_ms":         "B pickup max while A drains (ms)",
		"b_flood_insert_p95_ms":  "B insert call p95 while A drains (ms, in the pickup)",
		"b_flood_p95_loading_ms": "B pickup p95 while A's backlog is inserted (ms)",
		"b_flood_p95_loaded_ms":  "B pickup p95 after A's backlog is in (ms)", "b_flood_jobs": "B jobs inserted while A drained",
		"plain_drain_jobs_per_s": "plain drain jobs/s (no tenants)", "a_drain_jobs_per_s": "A drain jobs/s (beside B)",
		"a_drain_vs_plain": "A drain ÷ plain drain (target ≥ 0.9)",
	} {
		labels[k] = v
	}
	for k, d := range map[string]int{
		"b_idle_p95_ms": -1, "b_flood_p95_ms": -1, "b_p95_ratio": -1, "b_flood_p50_ms": -1, "b_flood_max_ms": -1,
		"b_flood_insert_p95_ms": -1, "b_flood_p95_loading_ms": -1, "b_flood_p95_loaded_ms": -1,
		"plain_drain_jobs_per_s": 1, "a_drain_jobs_per_s": 1, "a_drain_vs_plain": 1,
	} {
		direction[k] = d
	}
}

// tenantInserter is an instance that stores a job's tenant (pronto's InsertOpts.Tenant).
type tenantInserter interface {
	insertTenant(ctx context.Context, as []benchArgs, tenant string) error
}

func (i *prontoInstance) insertTenant(ctx context.Context, as []benchArgs, tenant string) error {
	ps := make([]pronto.InsertManyParams, len(as))
	var o *pronto.InsertOpts
	if tenant != "" {
		o = &pronto.InsertOpts{Tenant: tenant}
	}
	for k := range as {
		ps[k] = pronto.InsertManyParams{Args: as[k], Opts: o}
	}
	_, err := i.inserter.InsertMany(ctx, ps)
	return err
}

// floodInsert inserts as for tenant (A or B; "" for none) on any instance.
func floodInsert(rc *runCtx, as []benchArgs, tenant string) error {
	if ti, ok := rc.inst.(tenantInserter); ok {
		return ti.insertTenant(rc.ctx, as, tenant)
	}
	if len(as) == 1 {
		return rc.inst.insert(rc.ctx, as[0], 0)
	}
	return rc.inst.insertMany(rc.ctx, as, 0)
}

// Tenant numbers in benchArgs.Tenant (the recorder keeps them per job).
const (
	floodPlain = 0
	floodA     = 1
	floodB     = 2
)

// insertLag is one of B's inserts: when it began (ns) and how long the call took (ms).
type insertLag struct {
	ins int64
	ms  float64
}

// paceB inserts B's jobs at sc.rate from seq on until stop is closed (or, when dur > 0, for dur),
// and returns how many it inserted and the first insert error; lags, when not nil, gets each
// insert's duration.
func paceB(rc *runCtx, seq *atomic.Int64, dur time.Duration, stop <-chan struct{}, lags *[]insertLag) (int, error) {
	step := time.Duration(float64(time.Second) / rc.sc.rate)
	start := time.Now()
	var n int
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * step)
		if dur > 0 && due.Sub(start) >= dur {
			break
		}
		select {
		case <-stop:
			wg.Wait()
			return n, firstErr
		case <-time.After(time.Until(due)):
		}
		a := benchArgs{Seq: seq.Add(1) - 1, Ins: time.Now().UnixNano(), Tenant: floodB}
		wg.Add(1)
		n++
		goHarness(func() {
			defer wg.Done()
			err := floodInsert(rc, []benchArgs{a}, "B")
			took := float64(time.Now().UnixNano()-a.Ins) / 1e6
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if lags != nil {
				*lags = append(*lags, insertLag{ins: a.Ins, ms: took})
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return n, firstErr
}

// loadBacklog inserts n jobs of tenant t (name tenant) at once, in batches of 5000, from seq on.
func loadBacklog(rc *runCtx, seq *atomic.Int64, n, t int, tenant string) error {
	const batch = 5000
	now := time.Now().UnixNano()
	for off := 0; off < n; off += batch {
		k := min(batch, n-off)
		as := make([]benchArgs, k)
		for i := range as {
			as[i] = benchArgs{Seq: seq.Add(1) - 1, Ins: now, Tenant: t}
		}
		if err := floodInsert(rc, as, tenant); err != nil {
			return fmt.Errorf("loading the backlog of tenant %q: %w", tenant, err)
		}
	}
	return nil
}

// waitEnds waits until the recorder holds want successful ends of tenant t, or the deadline.
func waitEnds(rec *recorder, t int, want int, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		n := 0
		for _, e := range rec.events() {
			if e.kind == 'E' && e.ok && int(e.tenant) == t {
				n++
			}
		}
		if n >= want {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// drainSpan returns the first start and the last end of tenant t's jobs with seq in [from, to).
func drainSpan(evs []ev, t int, from, to int64) (first, last int64, done int) {
	first = math.MaxInt64
	for _, e := range evs {
		if e.kind != 'E' || !e.ok || int(e.tenant) != t || e.seq < from || e.seq >= to {
			continue
		}
		first = min(first, e.start)
		last = max(last, e.end)
		done++
	}
	return first, last, done
}

// pickups returns the pickup latencies (ms) of tenant t's jobs with seq in [from, to) inserted
// within [lo, hi] (ns; 0 for no bound).
func pickups(evs []ev, t int, from, to, lo, hi int64) []float64 {
	var out []float64
	for _, e := range evs {
		if e.kind != 'E' || int(e.tenant) != t || e.seq < from || e.seq >= to || e.attempt != 1 {
			continue
		}
		if (lo > 0 && e.ins < lo) || (hi > 0 && e.ins > hi) {
			continue
		}
		out = append(out, float64(e.start-e.ins)/1e6)
	}
	return out
}

// drainRate is a backlog's drain rate: its jobs over the time from the first start to the last end.
func drainRate(first, last int64, done, want int) float64 {
	if done < want || last <= first {
		return math.NaN()
	}
	return float64(done) / (float64(last-first) / 1e9)
}

// runPlainDrain drains sc.backlog jobs without a tenant, inserted at once while the workers run, in
// an instance of its own (so neither drain meets the other's dead rows), and returns the rate.
func runPlainDrain(rc *runCtx, workers int) (float64, error) {
	id := rc.id + "p"
	if err := rc.sys.create(rc.ctx, rc.e, id); err != nil {
		return 0, err
	}
	defer func() { _ = rc.sys.drop(context.Background(), rc.e, id) }()
	inst, err := rc.sys.open(rc.ctx, rc.e, id)
	if err != nil {
		return 0, err
	}
	defer inst.close()
	prc := *rc
	prc.id, prc.inst = id, inst
	rec := newRecorder(0, false)
	h, err := prc.startHost(workers, 1, rec)
	if err != nil {
		return 0, err
	}
	defer h.stop()
	if _, err := h.readyAt(30 * time.Second); err != nil {
		return 0, err
	}
	var seq atomic.Int64
	if err := loadBacklog(&prc, &seq, rc.sc.backlog, floodPlain, ""); err != nil {
		return 0, err
	}
	if !waitEnds(rec, floodPlain, rc.sc.backlog, time.Now().Add(rc.sc.tail)) {
		rc.res.Notes = append(rc.res.Notes, "plain drain: not done within the tail")
	}
	f, l, done := drainSpan(rec.events(), floodPlain, 0, seq.Load())
	return drainRate(f, l, done, rc.sc.backlog), nil
}

func runFlood(rc *runCtx) error {
	sc, res := rc.sc, rc.res
	workers := rc.sys.workersFor(sc.name, sc.workers)
	_, fair := rc.inst.(tenantInserter)
	res.Params["tenants_stored"] = fair

	// The plain drain, in a fresh instance of its own.
	plain, err := runPlainDrain(rc, workers)
	if err != nil {
		return fmt.Errorf("plain drain: %w", err)
	}

	rec := newRecorder(0, false)
	h, err := rc.startHost(workers, 1, rec)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			h.stop()
		}
	}()
	if _, err := h.readyAt(30 * time.Second); err != nil {
		return err
	}
	var seq atomic.Int64

	// B alone on an idle queue.
	idleFrom := seq.Load()
	nIdle, err := paceB(rc, &seq, sc.phase, nil, nil)
	if err != nil {
		return fmt.Errorf("idle phase: %w", err)
	}
	idleTo := seq.Load()
	if !waitEnds(rec, floodB, nIdle, time.Now().Add(sc.tail)) {
		res.Notes = append(res.Notes, "idle phase: not every B job ran within the tail")
	}

	// A floods while B keeps inserting.
	stop := make(chan struct{})
	bFrom := seq.Load()
	var nB int
	var bErr error
	var bLags []insertLag
	var wg sync.WaitGroup
	wg.Add(1)
	goHarness(func() {
		defer wg.Done()
		nB, bErr = paceB(rc, &seq, 0, stop, &bLags)
	})
	var aSeq atomic.Int64
	aSeq.Store(1 << 50) // A's seqs live apart from B's
	aFrom := aSeq.Load()
	loadErr := loadBacklog(rc, &aSeq, sc.backlog, floodA, "A")
	aLoaded := time.Now().UnixNano()
	aTo := aSeq.Load()
	drained := loadErr == nil && waitEnds(rec, floodA, sc.backlog, time.Now().Add(sc.tail))
	close(stop)
	wg.Wait()
	if loadErr != nil {
		return loadErr
	}
	if bErr != nil {
		return fmt.Errorf("flood phase, B's inserts: %w", bErr)
	}
	if !drained {
		res.Notes = append(res.Notes, "flood: A not drained within the tail")
	}
	bTo := seq.Load()
	if !waitEnds(rec, floodB, nIdle+nB, time.Now().Add(10*time.Second)) {
		res.Notes = append(res.Notes, "flood: not every B job ran")
	}
	g, rss, cpu := h.stop()
	stopped = true

	evs := rec.events()
	idle := sortedCopy(pickups(evs, floodB, idleFrom, idleTo, 0, 0))
	af, al, adone := drainSpan(evs, floodA, aFrom, aTo)
	during := sortedCopy(pickups(evs, floodB, bFrom, bTo, af, al))
	aRate := drainRate(af, al, adone, sc.backlog)
	// Where B's wait goes: its insert calls while A drains, and its pickups before and after A's
	// backlog was all inserted (while A's inserts of 5000 share the database with the claims).
	var lagsDuring []float64
	for _, l := range bLags {
		if l.ins >= af && l.ins <= al {
			lagsDuring = append(lagsDuring, l.ms)
		}
	}
	slices.Sort(lagsDuring)
	res.set("b_flood_insert_p95_ms", percentile(lagsDuring, 95))
	res.set("b_flood_p95_loading_ms", percentile(sortedCopy(pickups(evs, floodB, bFrom, bTo, af, aLoaded)), 95))
	res.set("b_flood_p95_loaded_ms", percentile(sortedCopy(pickups(evs, floodB, bFrom, bTo, aLoaded, al)), 95))
	res.set("workers", float64(workers))
	res.set("b_idle_jobs", float64(len(idle)))
	res.set("b_idle_p50_ms", percentile(idle, 50))
	res.set("b_idle_p95_ms", percentile(idle, 95))
	res.set("b_flood_jobs", float64(len(during)))
	res.set("b_flood_p50_ms", percentile(during, 50))
	res.set("b_flood_p95_ms", percentile(during, 95))
	res.set("b_flood_max_ms", percentile(during, 100))
	res.set("b_p95_ratio", percentile(during, 95)/percentile(idle, 95))
	res.set("plain_drain_jobs_per_s", plain)
	res.set("a_drain_jobs_per_s", aRate)
	res.set("a_drain_vs_plain", aRate/plain)
	res.set("goroutines_max", float64(g))
	res.set("rss_max_mb", float64(rss)/(1<<20))
	res.set("cpu_s", cpu)
	return nil
}
