package pronto

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Backpressure (ojs-backpressure.md): a queue may have a maximum depth, the number of its jobs that
// have not finished (available, scheduled, retryable, pending, active). An insert that would take a
// bounded queue beyond it fails with a *QueueFullError (errors.Is(err, ErrQueueFull)); a batch is
// refused whole. Queues are unbounded unless QueueSetMaxDepth bounds them.
//
// Counting depth costs no round trip per insert: each client reads the bounds at most every
// boundsEvery and a bounded queue's depth at most every depthEvery, and adds what it inserted since.
// Inserts into unbounded queues never read a depth, nor count: a queue bounded anew, or whose bound
// was lowered, is recounted at its next insert. The price is precision: jobs finished since the
// last read still count (the bound is met early, never late, by one client), and what other clients
// inserted in the meantime is not seen yet, so several clients together may overshoot a bound by what
// they insert within depthEvery. A read does not see the client's own inserts still being written
// either: what they counted is added to it until they return (inflight), else the inserts admitted
// on that read would take the queue beyond its bound once the slow ones land. An insert into the
// application's transaction (InsertTx, InsertSQLTx) stays in flight until the transaction commits or
// rolls back, as no read sees its jobs before (holdUntilTxEnds): else every open transaction could
// fill the room left, and the bound be passed by as many times that once they commit.
// What an insert counted is taken back out when the store does not keep the job (a unique duplicate or conflict, a refusal by a tenant limit); after any other failed
// insert the queue is recounted at its next insert, since the store may or may not have kept it.
//
// An insert that stores nothing takes no room. When a bound is about to refuse an insert, and the
// store can say which unique keys are held (store.UniqueHolder), the jobs whose key is held under the
// ignore or reject policy are left out of the count, in one look-up for the whole insert, and the
// bound is checked again: such a job meets its key's holder and stores nothing (a duplicate, or a
// conflict). Inserts the bound admits never look keys up.

// ErrQueueFull is matched (errors.Is) by the error of an insert refused by a queue's maximum depth.
var ErrQueueFull = errors.New("queue is full")

// QueueFullError is the error of an insert refused because its queue reached its maximum depth.
type QueueFullError struct {
	// Queue is the bounded queue.
	Queue string
	// Depth is the queue's depth as the client counted it (jobs that have not finished).
	Depth int64
	// MaxDepth is the queue's bound.
	MaxDepth int64
	// Adding is how many jobs of the refused insert were for Queue.
	Adding int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue %q is full: %d jobs that have not finished, at most %d (adding %d); retry later",
		e.Queue, e.Depth, e.MaxDepth, e.Adding)
}

// Is makes errors.Is(err, ErrQueueFull) hold.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

const (
	boundsEvery = time.Second
	depthEvery  = 500 * time.Millisecond
)

// backpressure is a client's view of the queue bounds and the bounded queues' depths.
type backpressure struct {
	mu       sync.Mutex
	boundsAt time.Time
	bounds   map[string]int64
	depths   map[string]*queueDepth // made on first use
	// inflight counts, by queue, the jobs that admissions counted and whose insert has not returned
	// yet, or whose application transaction has not ended: a depth read may not see them, so each
	// read adds them.
	inflight map[string]int64
	// flights holds what each insert in flight counted, by queue, under its first job: the paths
	// that end an insert pass its jobs, not always its depthAdmission (see landDepths).
	flights map[*store.InsertParams]map[string]int
	// flying is len(flights), read without mu: an insert into no bounded queue (none in flight)
	// lands without taking mu.
	flying atomic.Int64
	// depthEvery, when positive, replaces the package's depthEvery (tests only).
	depthEvery time.Duration
}

// queueDepth is one read of a queue's depth plus what the client inserted since. Each read makes a
// new one, so an admission can tell whether the count it raised is still the current one.
type queueDepth struct {
	n  int64
	at time.Time
}

func (bp *backpressure) recountEvery() time.Duration {
	if bp.depthEvery > 0 {
		return bp.depthEvery
	}
	return depthEvery
}

// depthAdmission is what checkBounds counted for an insert: for each bounded queue of its jobs, the
// count it raised, so that the jobs the store did not keep are taken back out of that count only (a
// later read never saw them); and the jobs it left out as duplicates of held keys.
type depthAdmission struct {
	counts map[string]*queueDepth
	// skipped[i] reports that ps[i] was not counted; nil when every job was.
	skipped []bool
}

// counted reports whether checkBounds counted the i-th job of the insert.
func (a depthAdmission) counted(i int) bool { return a.skipped == nil || !a.skipped[i] }

// checkBounds refuses ps when one of its bounded queues would go beyond its maximum depth, and
// otherwise counts ps into the queues' depths, returning what it counted (see settleDepths). Before
// refusing, it leaves out the jobs that would store nothing, as held tells (heldKeys.duplicates).
func (c *Client) checkBounds(ctx context.Context, ps []*store.InsertParams, held *heldKeys) (depthAdmission, error) {
	qb, ok := c.store.(store.QueueBounder)
	if !ok {
		return depthAdmission{}, nil
	}
	bp := &c.bp
	bp.mu.Lock()
	defer bp.mu.Unlock()
	now := time.Now()
	if now.Sub(bp.boundsAt) >= boundsEvery {
		bounds, err := qb.QueueMaxDepths(ctx)
		if err != nil {
			// Fail open: a store that cannot say its bounds keeps the last ones known.
			c.cfg.Logger.Warn("pronto: reading queue bounds failed; keeping the last known", "error", err)
		} else {
			bp.rebound(bounds)
		}
		bp.boundsAt = now
	}
	if len(bp.bounds) == 0 {
		return depthAdmission{}, nil
	}
	skipped := held.known()
	adding := bp.adding(ps, skipped)
	if adding == nil {
		return depthAdmission{}, nil
	}
	var stale []string
	for q := range adding {
		if d := bp.depths[q]; d == nil || now.Sub(d.at) >= bp.recountEvery() {
			stale = append(stale, q)
		}
	}
	if bp.depths == nil {
		bp.depths = map[string]*queueDepth{}
	}
	if len(stale) > 0 {
		depths, err := qb.QueueDepths(ctx, stale)
		if err != nil {
			return depthAdmission{}, fmt.Errorf("counting the depth of bounded queues %v: %w", stale, err)
		}
		for _, q := range stale {
			bp.depths[q] = &queueDepth{n: depths[q] + bp.inflight[q], at: now}
		}
	}
	full := bp.full(adding)
	if full != nil && held.mayHelp(c, func(p *store.InsertParams) bool { return p.Queue == full.Queue }) {
		if skipped = held.duplicates(ctx, c); skipped != nil {
			adding = bp.adding(ps, skipped)
			full = bp.full(adding)
		}
	}
	if full != nil {
		return depthAdmission{}, full
	}
	adm := depthAdmission{counts: make(map[string]*queueDepth, len(adding)), skipped: skipped}
	if bp.inflight == nil {
		bp.inflight, bp.flights = map[string]int64{}, map[*store.InsertParams]map[string]int{}
	}
	flight := bp.flights[ps[0]] // nil unless the same jobs are being inserted twice at once
	if flight == nil {
		flight = make(map[string]int, len(adding))
		bp.flights[ps[0]] = flight
		bp.flying.Add(1)
	}
	for q, n := range adding {
		flight[q] += n
		bp.depths[q].n += int64(n)
		adm.counts[q] = bp.depths[q]
		bp.inflight[q] += int64(n)
	}
	return adm, nil
}

// landDepths ends what checkBounds counted for ps being in flight, once their insert returned or was
// refused before the store: a depth read from now on sees what the store kept of them. Every path
// that ends an insert calls it, some twice (settleDepths, refundDepths, settleFastTenants, which an
// InsertManyFast that stored every job reaches without its depthAdmission); only the first counts.
func (c *Client) landDepths(ps []*store.InsertParams) {
	if len(ps) == 0 {
		return
	}
	bp := &c.bp
	if bp.flying.Load() == 0 { // this insert's own flight, if any, was counted by its goroutine
		return
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	adding, ok := bp.flights[ps[0]]
	if !ok {
		return
	}
	delete(bp.flights, ps[0])
	bp.flying.Add(-1)
	bp.subtract(adding)
}

// holdDepths takes what checkBounds counted for ps out of flight without landing it, for an insert
// into the application's transaction: its jobs stay added to every depth read (a read sees them only
// once the transaction commits) until release is called, once the transaction ended (later calls do
// nothing). nil when ps counted nothing, or landed already.
func (c *Client) holdDepths(ps []*store.InsertParams) (release func()) {
	bp := &c.bp
	if len(ps) == 0 || bp.flying.Load() == 0 {
		return nil
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	adding, ok := bp.flights[ps[0]]
	if !ok {
		return nil
	}
	delete(bp.flights, ps[0])
	bp.flying.Add(-1)
	return sync.OnceFunc(func() {
		bp.mu.Lock()
		defer bp.mu.Unlock()
		bp.subtract(adding)
	})
}

// subtract takes what one insert counted out of inflight. bp.mu must be held.
func (bp *backpressure) subtract(adding map[string]int) {
	for q, n := range adding {
		if bp.inflight[q] -= int64(n); bp.inflight[q] <= 0 {
			delete(bp.inflight, q)
		}
	}
}

// rebound replaces the bounds with bounds just read. A queue no longer bounded loses its depth (its
// inserts are no longer counted), so one bounded anew is recounted at its next insert; so is one
// whose bound was lowered, which then applies to a fresh count. A raised bound keeps the count this
// client kept up, which can only meet it early. bp.mu must be held.
func (bp *backpressure) rebound(bounds map[string]int64) {
	for q := range bp.depths {
		if b, bounded := bounds[q]; !bounded || b < bp.bounds[q] {
			delete(bp.depths, q)
		}
	}
	bp.bounds = bounds
}

// adding counts the jobs of ps in bounded queues by queue, leaving out those skipped marks (nil: none).
// Every bounded queue of ps is present, with 0 when all its jobs are left out. bp.mu must be held.
func (bp *backpressure) adding(ps []*store.InsertParams, skipped []bool) map[string]int {
	var adding map[string]int
	for i, p := range ps {
		if _, bounded := bp.bounds[p.Queue]; bounded {
			if adding == nil {
				adding = map[string]int{}
			}
			n := 1
			if skipped != nil && skipped[i] {
				n = 0
			}
			adding[p.Queue] += n
		}
	}
	return adding
}

// full returns the refusal of the first queue (by name) that adding would take beyond its bound, or
// nil; a queue adding nothing is never refused. bp.mu must be held and the depths of adding's queues
// read.
func (bp *backpressure) full(adding map[string]int) *QueueFullError {
	var refusal *QueueFullError
	for q, n := range adding {
		if d, max := bp.depths[q].n, bp.bounds[q]; n > 0 && d+int64(n) > max && (refusal == nil || q < refusal.Queue) {
			refusal = &QueueFullError{Queue: q, Depth: d, MaxDepth: max, Adding: n}
		}
	}
	return refusal
}

// settleDepths settles what checkBounds counted for ps once their insert returned rows (in ps's
// order) and err: the jobs the store certainly did not keep (unique duplicates, a batch refused
// whole for a unique conflict or a taken id) are taken back out, and a job left out as a duplicate
// that the store kept after all (its key's holder moved on meanwhile) is added; after another error,
// or rows that cannot be matched to ps, the queues are recounted at their next insert.
func (c *Client) settleDepths(adm depthAdmission, ps []*store.InsertParams, rows []*JobRow, err error) {
	c.landDepths(ps)
	switch {
	case len(adm.counts) == 0:
	case errors.Is(err, ErrUniqueConflict) || errors.Is(err, ErrDuplicate):
		c.refundDepths(adm, ps)
	case err != nil || len(rows) != len(ps):
		c.forgetDepths(adm)
	default:
		var diff map[string]int64
		for i, r := range rows {
			switch {
			case r == nil:
			case r.Duplicate && adm.counted(i):
				diff = addTo(diff, ps[i].Queue, -1)
			case !r.Duplicate && !adm.counted(i):
				diff = addTo(diff, ps[i].Queue, 1)
			}
		}
		c.adjustDepths(adm, diff)
	}
}

// addTo adds n to m[k], making m when nil.
func addTo(m map[string]int64, k string, n int64) map[string]int64 {
	if m == nil {
		m = map[string]int64{}
	}
	m[k] += n
	return m
}

// refundDepths takes the jobs of ps that checkBounds counted, none of which the store inserted, back
// out of the counts adm raised, unless a read replaced them since.
func (c *Client) refundDepths(adm depthAdmission, ps []*store.InsertParams) {
	c.landDepths(ps)
	if len(adm.counts) == 0 {
		return
	}
	var diff map[string]int64
	for i, p := range ps {
		if adm.counted(i) {
			diff = addTo(diff, p.Queue, -1)
		}
	}
	c.adjustDepths(adm, diff)
}

// adjustDepths adds diff to the counts adm raised, by queue, unless a read replaced them since.
func (c *Client) adjustDepths(adm depthAdmission, diff map[string]int64) {
	if len(adm.counts) == 0 || len(diff) == 0 {
		return
	}
	bp := &c.bp
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for q, n := range diff {
		if d := adm.counts[q]; d != nil && bp.depths[q] == d {
			d.n = max(d.n+n, 0)
		}
	}
}

// forgetDepths drops the counts adm raised, unless a read replaced them since, so that the next
// insert into their queues reads their depth: used when the store may or may not have kept the jobs.
func (c *Client) forgetDepths(adm depthAdmission) {
	bp := &c.bp
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for q, d := range adm.counts {
		if bp.depths[q] == d {
			delete(bp.depths, q)
		}
	}
}

// QueueSetMaxDepth bounds queue: an insert that would take it beyond maxDepth jobs that have not
// finished fails with ErrQueueFull. 0 removes the bound. Every client sees a new bound within about a
// second. Jobs inserted into an application's transaction (InsertTx, InsertSQLTx) take room from the
// insert until the transaction ends: open transactions cannot together pass the bound. The store must implement store.QueueBounder (all of pronto's stores do).
func (c *Client) QueueSetMaxDepth(ctx context.Context, queue string, maxDepth int64) error {
	if !ValidQueueName(queue) {
		return invalidf("invalid queue name %q", queue)
	}
	if maxDepth < 0 {
		return invalidf("max depth %d of queue %q: must be 0 (unbounded) or more", maxDepth, queue)
	}
	qb, ok := c.store.(store.QueueBounder)
	if !ok {
		return fmt.Errorf("pronto: %T keeps no queue bounds (store.QueueBounder): %w", c.store, ErrUnsupported)
	}
	if err := qb.SetQueueMaxDepth(ctx, queue, maxDepth); err != nil {
		return fmt.Errorf("pronto: %w", err)
	}
	bp := &c.bp
	bp.mu.Lock()
	bp.boundsAt = time.Time{}
	if b, bounded := bp.bounds[queue]; maxDepth == 0 || !bounded || maxDepth < b {
		delete(bp.depths, queue) // as rebound will, should reading the bounds fail
	}
	bp.mu.Unlock()
	return nil
}

// QueueMaxDepths returns the maximum depth of every bounded queue (see QueueSetMaxDepth).
func (c *Client) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	qb, ok := c.store.(store.QueueBounder)
	if !ok {
		return map[string]int64{}, nil
	}
	m, err := qb.QueueMaxDepths(ctx)
	if err != nil {
		return nil, fmt.Errorf("pronto: %w", err)
	}
	return m, nil
}
