package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Pool isolation for fetches naming no pool (ojs-fair-scheduling.md §6.3), and what the scheduler
// reports (§11): the scheduling.* events and the dispatch metrics.
//
// Isolation needs the pools on every fetch, also those naming none, which read no pools before; they
// read them from a cache refreshed at most every PoolRecheck (a fetch naming a pool reads them anyway
// and refreshes it), so isolation costs no store round trip per fetch.
//
// The events are edge-triggered, each once per occurrence on the server that sees it:
// scheduling.pool_overloaded when a fetch through a pool finds it at its concurrency (again only
// after a fetch left it room: one that asked for fewer jobs than were free, or took fewer than it
// asked for; a pool kept full, each freed slot taken at once, is one occurrence), scheduling.queue_starved when a queue of a pool with jobs available went
// unreached by the pool's fetches for its rotation interval (again only after it was served), and
// scheduling.rebalanced when a PUT through this server changes a pool's strategy or weights.

// PoolRecheck is how often a server rereads the pools for the isolation of fetches naming no pool:
// a change made through another server applies to them here within it (through this server, and to
// fetches naming a pool, at once).
const PoolRecheck = 2 * time.Second

// minStarveRecheck spaces the store reads that check whether an unreached queue has jobs, however
// short its rotation interval.
const minStarveRecheck = time.Second

// SchedulingMetrics receives the scheduler's metrics (ojs-fair-scheduling.md §11.2);
// *promexport.Metrics implements it.
type SchedulingMetrics interface {
	// ObserveDispatch counts a job an OJS fetch took: its queue, the pool the fetch named ("" for
	// none) and how long the job had been due.
	ObserveDispatch(queue, pool string, wait time.Duration)
	// ObserveStarvation counts a queue found starved in pool.
	ObserveStarvation(queue, pool string)
}

// SetSchedulingMetrics sends the scheduler's metrics to m (nil: nowhere). pronto serve sets its
// Prometheus exporter.
func (s *Server) SetSchedulingMetrics(m SchedulingMetrics) {
	if m == nil {
		s.sched.metrics.Store(nil)
		return
	}
	s.sched.metrics.Store(&metricsRef{m})
}

type metricsRef struct{ m SchedulingMetrics }

// poolCache is a server's view of the pools' isolation.
type poolCache struct {
	mu         sync.Mutex
	loaded     bool
	refreshing bool      // one fetch rereads; the others use the last view meanwhile
	at         time.Time // when read; zero: reread at the next fetch
	isolated   map[string][]string
}

// set records pools as just read.
func (c *poolCache) set(pools []*pronto.WorkerPool) {
	iso := pronto.IsolatedQueues(pools)
	c.mu.Lock()
	c.isolated, c.at, c.loaded = iso, time.Now(), true
	c.mu.Unlock()
}

// invalidate has the next fetch reread the pools (after a change through this server).
func (c *poolCache) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// isolation returns the isolated queues (pronto.IsolatedQueues), from the cache while it is fresher
// than PoolRecheck. A store without settings has no pools; a failed read keeps the last view (none
// before the first read).
func (s *Server) isolation(ctx context.Context) map[string][]string {
	c := &s.sched.cache
	c.mu.Lock()
	if c.loaded && (c.refreshing || time.Since(c.at) < PoolRecheck) {
		iso := c.isolated
		c.mu.Unlock()
		return iso
	}
	c.refreshing = true
	c.mu.Unlock()
	pools, err := s.client.PoolList(ctx)
	if err == nil || errors.Is(err, pronto.ErrUnsupported) {
		c.set(pools)
	} else {
		s.log.Warn("pronto serve: reading the worker pools failed; keeping the last known", "err", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil && !errors.Is(err, pronto.ErrUnsupported) {
		c.at, c.loaded = time.Now(), true // retry after PoolRecheck, not on every fetch
	}
	return c.isolated
}

// isolate drops from a fetch's queues those that isolated pools reserve to others: pool is the pool
// the fetch named ("" for none). ok false: none is left (the fetch takes nothing; queues unchanged).
func isolate(iso map[string][]string, pool string, queues []string) (_ []string, ok bool) {
	out := func(q string) bool { return iso[q] != nil && !slices.Contains(iso[q], pool) }
	if len(iso) == 0 || !slices.ContainsFunc(queues, out) {
		return queues, true
	}
	kept := slices.DeleteFunc(slices.Clone(queues), out)
	return kept, len(kept) > 0
}

// poolWatch is what a server watches of a pool for its events.
type poolWatch struct {
	lastFetch  time.Time
	overloaded bool
	asked      int // jobs the last fetch with room asked for, when it could fill the pool (0: it could not)
	queues     map[string]*queueWatch
}

// queueWatch is one queue of a pool.
type queueWatch struct {
	reached    time.Time // when a fetch through the pool last served it or found it empty
	checkAfter time.Time // no store read for it before
	starved    bool      // reported, until it is served
}

// starveWindow is how long a queue of p may go unreached before it counts as starved: its rotation
// interval (§8.1), the default when it has none.
func starveWindow(p *pronto.WorkerPool) time.Duration {
	if sp := p.StarvationPrevention; sp != nil && sp.RotationInterval > 0 {
		return sp.RotationInterval
	}
	return pronto.DefaultRotationInterval
}

// watch returns pool p's watch. Under s.mu.
func (s *sched) watch(p *pronto.WorkerPool, now time.Time) *poolWatch {
	if s.watches == nil {
		s.watches = map[string]*poolWatch{}
	}
	w := s.watches[p.Name]
	if w == nil {
		w = &poolWatch{lastFetch: now, queues: map[string]*queueWatch{}}
		s.watches[p.Name] = w
	}
	return w
}

// forget drops a deleted pool's watch.
func (s *sched) forget(pool string) {
	s.mu.Lock()
	delete(s.watches, pool)
	s.mu.Unlock()
}

// queue returns queue q's watch, created as reached now. Under s.mu.
func (w *poolWatch) queue(q string, now time.Time) *queueWatch {
	qw := w.queues[q]
	if qw == nil {
		qw = &queueWatch{reached: now}
		w.queues[q] = qw
	}
	return qw
}

// starveCandidate is a queue unreached for its pool's window, since when.
type starveCandidate struct {
	queue string
	since time.Time
}

// starving returns the queues of pool p that a fetch through it at now finds unreached for longer than
// the pool's window and not reported yet, for a check of their jobs; each is checked at most every
// max(window, minStarveRecheck). A pool not fetched through for its window starts its queues afresh:
// without fetches there is no choice between its queues, so no starvation.
func (s *sched) starving(p *pronto.WorkerPool, now time.Time) []starveCandidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watch(p, now)
	window := starveWindow(p)
	idle := now.Sub(w.lastFetch) > window
	w.lastFetch = now
	var out []starveCandidate
	for _, q := range p.Queues {
		qw := w.queue(q, now)
		if idle {
			qw.reached = now
			continue
		}
		if qw.starved || now.Before(qw.checkAfter) || now.Sub(qw.reached) <= window {
			continue
		}
		qw.checkAfter = now.Add(max(window, minStarveRecheck))
		out = append(out, starveCandidate{q, qw.reached})
	}
	return out
}

// markStarved records queue of pool p as starved (reported); false when it already was.
func (s *sched) markStarved(p *pronto.WorkerPool, queue string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	qw := s.watch(p, now).queue(queue, now)
	if qw.starved {
		return false
	}
	qw.starved = true
	return true
}

// reached records what a fetch through pool p reached: the queues it tried up to the last one it
// served (or all of them when it took nothing), which ends their starvation; and ends the pool's
// overload when the fetch, able to fill the pool, took fewer jobs than it asked for.
// Under s.mu.
func (s *sched) reached(p *pronto.WorkerPool, tried []string, jobs []*pronto.JobRow, now time.Time) {
	w := s.watch(p, now)
	last := len(tried) - 1
	if len(jobs) > 0 {
		// The claim takes the queues in order: those after the last served may not have been
		// reached.
		last = -1
		for _, j := range jobs {
			last = max(last, slices.Index(tried, j.Queue))
		}
	}
	for _, q := range tried[:last+1] {
		qw := w.queue(q, now)
		qw.reached, qw.starved = now, false // reached: served, or found empty
	}
	if w.asked > 0 && len(jobs) < w.asked {
		w.overloaded, w.asked = false, 0 // the queues ran dry before the pool filled
	}
}

// setOverloaded records whether pool p is at its concurrency; true when it just became so. A full
// pool reaches all its queues: none is starved by the strategy while no queue can be served.
func (s *sched) setOverloaded(p *pronto.WorkerPool, on bool, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watch(p, now)
	if on {
		for _, q := range p.Queues {
			w.queue(q, now).reached = now
		}
	}
	was := w.overloaded
	w.overloaded = on
	return on && !was
}

// room records a fetch through pool p that found free slots and asks for count jobs (count ≤ free):
// when it cannot fill the pool the overload is over; otherwise served decides by what it takes.
func (s *sched) room(p *pronto.WorkerPool, free int64, count int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watch(p, now)
	if free > int64(count) {
		w.overloaded, w.asked = false, 0
		return
	}
	w.asked = count
}

// checkStarvation reports the queues of pool p that fetches through it leave unreached for its window
// while they have jobs available (scheduling.queue_starved, §11.1). u holds the queues' counts when
// the fetch read them; otherwise they are read here, only when a queue is a candidate.
func (s *Server) checkStarvation(ctx context.Context, p *pronto.WorkerPool, u *poolUse, now time.Time) *poolUse {
	cands := s.sched.starving(p, now)
	if len(cands) == 0 {
		return u
	}
	if u == nil {
		var err error
		if u, err = s.readPoolUse(ctx, false); err != nil {
			s.log.Warn("pronto serve: reading queue counts for starvation checks failed", "pool", p.Name, "err", err)
			return nil
		}
	}
	for _, c := range cands {
		avail := u.available[c.queue]
		if avail == 0 || !s.sched.markStarved(p, c.queue, now) {
			continue
		}
		d := now.Sub(c.since)
		b := make([]byte, 0, 160)
		b = append(b, '{')
		b = appendStringField(b, "queue", c.queue)
		b = appendStringField(b, "pool", p.Name)
		b = appendStringField(b, "duration", isodur.Format(d.Round(time.Millisecond)))
		b = appendIntField(b, "duration_ms", d.Milliseconds())
		b = appendIntField(b, "available_count", avail)
		b = append(b, '}')
		s.events.add(event{typ: "scheduling.queue_starved", source: s.source, subject: c.queue, at: now, queue: c.queue, data: b})
		if m := s.sched.metrics.Load(); m != nil {
			m.m.ObserveStarvation(c.queue, p.Name)
		}
	}
	return u
}

// overloadedEvent records scheduling.pool_overloaded (§11.1): pool p has active jobs at its
// concurrency, waiting more available in its queues.
func (s *Server) overloadedEvent(p *pronto.WorkerPool, active int64, u *poolUse) {
	var waiting int64
	for _, q := range p.Queues {
		waiting += u.available[q]
	}
	b := make([]byte, 0, 128)
	b = append(b, '{')
	b = appendStringField(b, "pool", p.Name)
	b = appendIntField(b, "active_jobs", active)
	b = appendIntField(b, "waiting_jobs", waiting)
	b = appendIntField(b, "concurrency", int64(p.Concurrency))
	b = append(b, '}')
	s.events.add(event{typ: "scheduling.pool_overloaded", source: s.source, subject: p.Name, data: b})
}

// rebalancedEvent records scheduling.rebalanced (§11.1) when a pool's strategy or weights changed
// from prev (nil: the pool is new, nothing to report).
func (s *Server) rebalancedEvent(prev, cur *pronto.WorkerPool) {
	if prev == nil || prev.Strategy == cur.Strategy && maps.Equal(effectiveWeights(prev), effectiveWeights(cur)) {
		return
	}
	b := make([]byte, 0, 160)
	b = append(b, '{')
	b = appendStringField(b, "pool", cur.Name)
	b = appendStringField(b, "previous_strategy", prev.Strategy)
	b = appendStringField(b, "new_strategy", cur.Strategy)
	if len(prev.Weights) > 0 || len(cur.Weights) > 0 {
		pw, _ := json.Marshal(effectiveWeights(prev))
		nw, _ := json.Marshal(effectiveWeights(cur))
		b = appendRawField(b, "previous_weights", pw)
		b = appendRawField(b, "new_weights", nw)
	}
	b = append(b, '}')
	s.events.add(event{typ: "scheduling.rebalanced", source: s.source, subject: cur.Name, data: b})
}

// effectiveWeights is every queue's weight in a weighted pool (nil for another strategy).
func effectiveWeights(p *pronto.WorkerPool) map[string]int {
	if p.Strategy != pronto.PoolStrategyWeighted {
		return nil
	}
	w := make(map[string]int, len(p.Queues))
	for _, q := range p.Queues {
		w[q] = p.Weight(q)
	}
	return w
}
