package memory

import (
	"slices"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Fair scheduling across tenants (ojs-fair-scheduling.md). A queue's available jobs with a tenant and
// without a rate key are held by tenant, each tenant's jobs by kind in claim order, and the tenants
// that have such jobs form a ring. A claim in a queue whose ring is not empty walks the ring from its
// cursor, taking each tenant's best job in turn; the jobs without a tenant (and those with a rate
// key, which keep their key's heaps, and their tenant's limit: see tenantAside) take one turn of the
// ring together, behind a sentinel. A queue
// that never held a tenant's job has no ring, and its claims run exactly as before.

// tenantRing is a queue's ring of tenants with available jobs.
type tenantRing struct {
	byName map[string]*tenantNode
	// head is the sentinel: the jobs without a tenant. The ring is head, then the linked tenants in
	// the order they got work, then head again.
	head   tenantNode
	cur    *tenantNode // the participant whose turn it is
	used   int         // jobs cur has taken in its current turn (a tenant of weight w takes up to w)
	linked int         // tenants in the ring (head not counted)
}

// tenantNode is one tenant's available jobs in a queue, by kind.
type tenantNode struct {
	name       string
	heaps      map[string]*jheap
	prev, next *tenantNode
	linked     bool
}

func newTenantRing() *tenantRing {
	r := &tenantRing{byName: make(map[string]*tenantNode)}
	r.head.prev, r.head.next, r.cur = &r.head, &r.head, &r.head
	return r
}

// fairActive reports whether q's ring has a tenant with available jobs: the cheap probe that sends a
// claim down the fair path.
func (q *queue) fairActive() bool { return q.fair != nil && q.fair.linked > 0 }

// tenantHeap returns the heap that holds j, a job with a tenant and no rate key, while it is
// available, creating it and linking its tenant into the ring (at the end of the round: just before
// the sentinel).
func (q *queue) tenantHeap(j *job) *jheap {
	if q.fair == nil {
		q.fair = newTenantRing()
	}
	r := q.fair
	n := r.byName[j.Tenant]
	if n == nil {
		n = &tenantNode{name: j.Tenant, heaps: make(map[string]*jheap, 1)}
		r.byName[j.Tenant] = n
	}
	if !n.linked {
		n.prev, n.next = r.head.prev, &r.head
		r.head.prev.next = n
		r.head.prev = n
		n.linked = true
		r.linked++
	}
	h := n.heaps[j.Kind]
	if h == nil {
		h = &jheap{}
		n.heaps[j.Kind] = h
	}
	return h
}

// unlink takes n, whose heaps are all empty, out of the ring and forgets it.
func (r *tenantRing) unlink(n *tenantNode) {
	if r.cur == n {
		r.cur, r.used = n.next, 0
	}
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next, n.linked = nil, nil, false
	r.linked--
	delete(r.byName, n.name)
}

// take pops n's best live job of the given kinds (every kind when kinds is empty), skipping expired
// ones (they stay available until DiscardExpired), and reports whether n has no job left at all.
func (n *tenantNode) take(kinds []string, now time.Time) (*job, bool) {
	for {
		var best *jheap
		var top *entry
		for kind, h := range n.heaps {
			e := h.top()
			if e == nil {
				delete(n.heaps, kind)
				continue
			}
			if len(kinds) > 0 && !slices.Contains(kinds, kind) {
				continue
			}
			if top == nil || e.less(top) {
				best, top = h, e
			}
		}
		if top == nil {
			return nil, len(n.heaps) == 0
		}
		j := top.j
		best.pop()
		j.heap = nil
		if expired(j, now) {
			continue
		}
		return j, false
	}
}

// takeUntenanted pops the best claimable job of sel (the queue's jobs without a tenant, and those
// with a rate key), applying rate and tenant limits as the plain claim does, or returns nil when it
// has none.
func (s *Store) takeUntenanted(sel *selector, now time.Time, a *announcer, aside *tenantAside) *job {
	for {
		bi, top := -1, (*entry)(nil)
		if sel.ordered {
			bi, top = sel.best()
		} else {
			for i, h := range sel.hs {
				if e := h.top(); e != nil && (top == nil || e.less(top)) {
					bi, top = i, e
				}
			}
		}
		if top == nil {
			return nil
		}
		best, j := sel.hs[bi], top.j
		if s.passOver(sel, bi, j, now, a, aside) {
			continue
		}
		best.pop()
		j.heap = nil
		sel.fix(bi)
		if expired(j, now) {
			continue
		}
		return j
	}
}

// claimFair is Claim for a queue whose ring has tenants: a tenant of weight w takes up to w jobs per
// turn (one job each for the jobs without a tenant), the ring's cursor moving on after each turn, so
// a tenant's claim share does not depend on how many jobs it has waiting. A tenant at its limit
// (store.TenantLimitKey) passes its turn. A turn costs O(kinds of the tenant); a walk meets only
// tenants with available jobs.
func (s *Store) claimFair(q *queue, p store.ClaimParams, sel *selector, now, lease time.Time, a *announcer, aside *tenantAside, out []*store.Job) []*store.Job {
	r := q.fair
	idle := 0 // consecutive turns that found nothing; the ring has r.linked+1 participants
	next := func(n *tenantNode) { r.cur, r.used = n.next, 0 }
	for len(out) < p.Limit && idle <= r.linked {
		n := r.cur
		var j *job
		if n == &r.head {
			j = s.takeUntenanted(sel, now, a, aside)
			next(n)
		} else {
			if s.tenantBlocked(n.name, now) {
				next(n)
				idle++
				continue
			}
			var empty bool
			j, empty = n.take(p.Kinds, now)
			if empty {
				r.unlink(n) // moves the cursor on; the ring is a participant shorter, so no idle turn
				continue
			}
			if j != nil {
				r.used++
			}
			if j == nil || r.used >= s.tenantWeight(n.name) {
				next(n) // the tenant's turn is over
			}
		}
		if j == nil {
			idle++
			continue
		}
		idle = 0
		out = append(out, s.activate(j, p.WorkerFor(len(out)), now, lease))
	}
	return out
}

// activate makes j, just taken out of its heap, active under a new claim; s.mu must be held.
func (s *Store) activate(j *job, worker string, now, lease time.Time) *store.Job {
	s.unplace(j)
	j.State = store.StateActive
	j.Attempt++
	j.StartedAt = now
	j.LeaseExpiresAt = lease
	j.WorkerID = worker
	s.claims++
	j.ClaimToken = "m" + strconv.FormatUint(s.claims, 36)
	s.place(j)
	if j.rk != nil {
		j.rk.started(now)
	}
	// The start counts in the window of the tenant's limit too, whatever path claimed the job (a
	// key that is both, a rate key spelled like the tenant's limit key, counts it once).
	if j.Tenant != "" {
		if rk := s.tenantLimit(j.Tenant); rk != nil && rk != j.rk {
			rk.started(now)
		}
	}
	return j.export()
}

// tenantAside holds, for one claim, the jobs with a rate key taken off the top of their key's heap
// because their tenant is at its limit: the heap's other jobs (other tenants', or none) stay
// claimable behind them, and the claim puts them back before it returns. A tenant's limit always
// waits, so nothing else happens to them.
type tenantAside struct {
	jobs []*job
}

// asideMax bounds the jobs one claim sets aside: behind more of them, the rest of their heap waits
// for a later claim, as a key at its limit makes its heap wait.
const asideMax = 1000

// hold pops j, the top of its heap, into the set-aside jobs, or reports false, leaving j where it
// is, when the claim has set aside asideMax jobs already.
func (t *tenantAside) hold(j *job) bool {
	if len(t.jobs) >= asideMax {
		return false
	}
	j.heap.pop()
	// j.heap stays: it names the heap j returns to, and only restore reads it (j is available, so no
	// other path sees it before then).
	t.jobs = append(t.jobs, j)
	return true
}

// restore pushes the set-aside jobs back onto their heaps, as they were; s.mu must still be held.
func (t *tenantAside) restore() {
	for _, j := range t.jobs {
		j.heap.push(j.entry(^int64(j.Priority), nanos(j.ScheduledAt)))
	}
	t.jobs = nil
}

// passOver holds back j, the top job of sel.hs[bi], when its rate key has no room now, or sets it
// aside when its tenant has none, and reports whether it did: the claim then looks at the next job.
func (s *Store) passOver(sel *selector, bi int, j *job, now time.Time, a *announcer, aside *tenantAside) bool {
	if j.rk == nil || expired(j, now) {
		return false
	}
	if blocked, until := j.rk.blocked(now); blocked {
		if a.wantLimited {
			a.limited = j.rk.hit(a.limited, j.RateKey, now)
		}
		if s.holdBack(j, until, now, a) {
			sel.fix(bi)
		} else {
			// Its key waits for room: so do the other jobs of its heap, this claim over.
			sel.remove(bi)
		}
		return true
	}
	if j.Tenant != "" && s.tenantBlocked(j.Tenant, now) {
		if aside.hold(j) {
			sel.fix(bi)
		} else {
			sel.remove(bi)
		}
		return true
	}
	return false
}
