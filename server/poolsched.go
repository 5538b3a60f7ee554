package server

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Scheduling across a pool's queues (ojs-fair-scheduling.md §7, §8) and the dispatch counts behind
// GET /ojs/v1/admin/scheduling/stats (§10.2). A strategy orders the queues of a fetch through a
// pool before the claim, which takes them in that order (pronto.Client.RemoteFetch); what the fetch
// then took moves the pool's state on. The state is this server's: with several servers each
// rotates, weighs and counts the fetches it answers.

// statsWindow is the window of the per-queue figures of the scheduling statistics (§10.2's PT1M), in
// one-second buckets.
const statsWindow = 60

// sched is a server's scheduling state. The zero value is ready.
type sched struct {
	mu      sync.Mutex
	pools   map[string]*poolState
	queues  map[string]*queueDispatch
	watches map[string]*poolWatch // for the events (poolwatch.go)

	cache   poolCache // the pools' isolation, for fetches naming no pool
	metrics atomic.Pointer[metricsRef]
}

// poolState is one pool's state on this server.
type poolState struct {
	cfg    *pronto.WorkerPool // the config the state was built for; a change starts it afresh
	next   int                // round-robin: the index of the queue whose turn is next
	credit map[string]int     // weighted: each queue's current credit (smooth weighted round-robin)
	total  int64              // dispatches through the pool since the server started
	counts map[string]int64   // the same per queue
	recent *recentCounts      // starvation prevention: dispatches per queue over the rotation interval
}

// queueDispatch counts a queue's dispatches through this server: since it started, and per second
// over the last minute with their waits.
type queueDispatch struct {
	total   int64
	buckets [statsWindow]struct {
		sec, n, waitMS int64
	}
}

// sameConfig reports whether st was built for pool p's current config: strategy, queues, weights
// and starvation window (compared without allocating: this runs on every fetch through a pool).
func (st *poolState) sameConfig(p *pronto.WorkerPool) bool {
	return st.cfg.Strategy == p.Strategy && slices.Equal(st.cfg.Queues, p.Queues) && maps.Equal(st.cfg.Weights, p.Weights) &&
		recentWindow(st.cfg) == recentWindow(p)
}

// recentWindow is p's starvation window, 0 when starvation prevention is off.
func recentWindow(p *pronto.WorkerPool) time.Duration {
	if sp := p.StarvationPrevention; sp != nil && sp.Enabled {
		return sp.RotationInterval
	}
	return 0
}

// state returns pool p's state, started afresh when p's config changed. Under s.mu.
func (s *sched) state(p *pronto.WorkerPool) *poolState {
	if s.pools == nil {
		s.pools = map[string]*poolState{}
	}
	st := s.pools[p.Name]
	if st == nil || !st.sameConfig(p) {
		st = &poolState{cfg: p, credit: map[string]int{}, counts: map[string]int64{}}
		if st0 := s.pools[p.Name]; st0 != nil {
			// Counts since start outlive a config change; turns and credits do not.
			st.total, st.counts = st0.total, st0.counts
		}
		if d := recentWindow(p); d > 0 {
			st.recent = newRecentCounts(d)
		}
		s.pools[p.Name] = st
	}
	return st
}

// order sorts queues (a fetch's, all of them pool p's) into the order the fetch tries them in.
// available holds each queue's available jobs (read for least-loaded only).
func (s *sched) order(p *pronto.WorkerPool, queues []string, available map[string]int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(p)
	idx := func(q string) int { return slices.Index(p.Queues, q) }
	switch p.Strategy {
	case pronto.PoolStrategyRoundRobin:
		// From the pool's next turn on, wrapping around.
		n := len(p.Queues)
		start := st.next % n
		pos := func(q string) int { return (idx(q) - start + n) % n }
		slices.SortFunc(queues, func(a, b string) int { return pos(a) - pos(b) })
		return // each queue has its turn already: no starvation to prevent
	case pronto.PoolStrategyWeighted:
		// The queue whose credit plus weight is highest first (ties in the pool's order).
		key := func(q string) int { return st.credit[q] + p.Weight(q) }
		slices.SortStableFunc(queues, func(a, b string) int {
			return cmp.Or(cmp.Compare(key(b), key(a)), cmp.Compare(idx(a), idx(b)))
		})
	case pronto.PoolStrategyLeastLoaded:
		// The deepest backlog first (ties in the pool's order).
		slices.SortStableFunc(queues, func(a, b string) int {
			return cmp.Or(cmp.Compare(available[b], available[a]), cmp.Compare(idx(a), idx(b)))
		})
	}
	if st.recent == nil {
		return
	}
	// Starvation prevention (§8): the queues below their share of the pool's recent dispatches
	// go first, the most starved first; the others keep the strategy's order behind them.
	counts, total := st.recent.sum(now)
	if total == 0 {
		return
	}
	ratio := p.StarvationPrevention.MinDispatchRatio
	share := func(q string) float64 { return float64(counts[q]) / float64(total) }
	slices.SortStableFunc(queues, func(a, b string) int {
		sa, sb := share(a), share(b)
		if sa >= ratio && sb >= ratio {
			return 0 // neither starved: the strategy's order
		}
		return cmp.Compare(sa, sb) // the starved before the others, the most starved first
	})
}

// served moves the state on by the jobs a fetch took: the pool's (when the fetch named one, with its
// queues in the order tried), every queue's dispatch counts and the metrics.
func (s *sched) served(p *pronto.WorkerPool, tried []string, jobs []*pronto.JobRow, now time.Time) {
	if m := s.metrics.Load(); m != nil {
		pool := ""
		if p != nil {
			pool = p.Name
		}
		for _, j := range jobs {
			m.m.ObserveDispatch(j.Queue, pool, dispatchWait(j, now))
		}
	}
	if len(jobs) == 0 {
		if p != nil {
			s.mu.Lock()
			s.reached(p, tried, nil, now)
			s.mu.Unlock()
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues == nil {
		s.queues = map[string]*queueDispatch{}
	}
	sec := now.Unix()
	for _, j := range jobs {
		qd := s.queues[j.Queue]
		if qd == nil {
			qd = &queueDispatch{}
			s.queues[j.Queue] = qd
		}
		qd.total++
		b := &qd.buckets[sec%statsWindow]
		if b.sec != sec {
			b.sec, b.n, b.waitMS = sec, 0, 0
		}
		b.n++
		b.waitMS += dispatchWait(j, now).Milliseconds()
	}
	if p == nil {
		return
	}
	s.reached(p, tried, jobs, now)
	st := s.state(p)
	for _, j := range jobs {
		st.total++
		st.counts[j.Queue]++
		if st.recent != nil {
			st.recent.add(now, j.Queue)
		}
	}
	switch p.Strategy {
	case pronto.PoolStrategyRoundRobin:
		// The next fetch starts at the queue after the last one served (an empty queue in between
		// was skipped).
		if i := slices.Index(p.Queues, jobs[len(jobs)-1].Queue); i >= 0 {
			st.next = i + 1
		}
	case pronto.PoolStrategyWeighted:
		// Smooth weighted round-robin over the queues that could be served: those the claim tried
		// and found empty (before the last one served) sit this round out and keep their credit.
		last := slices.Index(tried, jobs[len(jobs)-1].Queue)
		var parts []string
		for i, q := range tried {
			if i < last && !slices.ContainsFunc(jobs, func(j *pronto.JobRow) bool { return j.Queue == q }) {
				continue
			}
			parts = append(parts, q)
		}
		sum := 0
		for _, q := range parts {
			sum += p.Weight(q)
		}
		for _, j := range jobs {
			for _, q := range parts {
				st.credit[q] += p.Weight(q)
			}
			st.credit[j.Queue] -= sum
		}
	}
}

// dispatchWait is how long j waited for its dispatch at now: from when it became available (its due
// time).
func dispatchWait(j *pronto.JobRow, now time.Time) time.Duration {
	if due := j.ScheduledAt; !due.IsZero() && now.After(due) {
		return now.Sub(due)
	}
	return 0
}

// queueStat is a queue's line of the scheduling statistics.
type queueStat struct {
	total, recent, waitMS int64
}

// queueStats returns every queue's dispatch counts on this server.
func (s *sched) queueStats(now time.Time) map[string]queueStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := now.Unix()
	out := make(map[string]queueStat, len(s.queues))
	for q, qd := range s.queues {
		st := queueStat{total: qd.total}
		for _, b := range qd.buckets {
			if b.sec > sec-statsWindow && b.sec <= sec {
				st.recent += b.n
				st.waitMS += b.waitMS
			}
		}
		out[q] = st
	}
	return out
}

// poolCounts returns pool p's dispatches on this server since it started: in total and per queue.
func (s *sched) poolCounts(p *pronto.WorkerPool) (int64, map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.pools[p.Name]
	if st == nil {
		return 0, map[string]int64{}
	}
	counts := make(map[string]int64, len(st.counts))
	for q, n := range st.counts {
		counts[q] = n
	}
	return st.total, counts
}

// recentBuckets is how many buckets a rotation interval is counted in: the window slides by a tenth
// of the interval.
const recentBuckets = 10

// recentCounts counts dispatches per queue over a sliding window, in buckets of a tenth of it (the
// window read covers between nine and ten tenths back, plus the current bucket).
type recentCounts struct {
	width   time.Duration
	buckets [recentBuckets]struct {
		idx    int64
		counts map[string]int64
	}
	sums map[string]int64 // sum's result, reused
}

func newRecentCounts(window time.Duration) *recentCounts {
	return &recentCounts{width: max(window/recentBuckets, time.Microsecond)}
}

func (r *recentCounts) add(now time.Time, queue string) {
	idx := now.UnixNano() / int64(r.width)
	b := &r.buckets[idx%recentBuckets]
	if b.counts == nil {
		b.counts = map[string]int64{}
	}
	if b.idx != idx {
		b.idx = idx
		clear(b.counts)
	}
	b.counts[queue]++
}

// sum returns the counts per queue over the window and their total; the map is valid until the
// next call.
func (r *recentCounts) sum(now time.Time) (map[string]int64, int64) {
	idx := now.UnixNano() / int64(r.width)
	if r.sums == nil {
		r.sums = map[string]int64{}
	}
	out := r.sums
	clear(out)
	var total int64
	for _, b := range r.buckets {
		if b.counts != nil && b.idx > idx-recentBuckets && b.idx <= idx {
			for q, n := range b.counts {
				out[q] += n
				total += n
			}
		}
	}
	return out, total
}
