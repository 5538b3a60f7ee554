// Package completer writes the outcomes of job attempts to the store in batches, off the workers'
// path: a worker hands its outcome over and its slot is free at once. Batches form naturally: while one
// batch is being written, new outcomes gather for the next, up to a size bound; when outcomes arrive
// quickly a small batch also waits FlushWindow for company. An idle system writes each outcome
// immediately and a busy one writes hundreds per statement.
//
// Between the two, when outcomes arrive a few milliseconds apart (a few hundred jobs a second), a
// batch that is still small waits up to Config.Linger for company, so each statement carries
// several outcomes instead of one: every statement is a round trip that costs both the client and
// the database far more CPU than the rows it writes. A job's worker slot is free as soon as its
// outcome is handed over, so lingering delays only when the outcome is visible in the store.
//
// The queue is bounded (Config.MaxPending): when the store writes outcomes more slowly than the
// workers produce them, Add waits for room, so the workers slow down to the store's pace instead of
// piling outcomes up in memory (and their jobs up as active in the database).
//
// A batch the store fails is tried again with backoff, and no outcome is given up for an error that
// may pass (an outcome given up is a job run again); only data the store refuses (Config.Transient)
// is split out and given up after a few tries. How a batch waits depends on the error:
//
//   - An outage (Config.Unavailable: the store down, unreachable, restarting) keeps the batch whole
//     for as long as it lasts: its pieces would only fail alike, in more calls.
//   - Any other error that persists past isolateAfter tries (a row locked past lock_timeout by a
//     session holding it, a statement_timeout) may be some outcomes' only: the batch is written by
//     halves, so the healthy outcomes are written at once, and an outcome that still fails alone is
//     set aside in a side lane. There it is tried on its own, with a backoff of its own, until it is
//     written (or ctx ends), while Run goes on writing the outcomes that come after it. So a
//     failing outcome holds no other: with one batch written at a time, it used to hold every later
//     outcome of the client.
//
// Isolating costs calls, so it is bounded: a pass spends about 2*log2(batch) failing calls, the lane
// holds at most maxSetAside outcomes, and what could be neither written nor set aside (every
// outcome failing, as under a migration's table lock) is tried whole again, isolated less and less
// often while the error lasts. A store's partial answer (store.FinishPartialError) settles the
// outcomes it knows wherever it comes, so none is sent again. Close has the lane tried at once, and
// Run returns only once the lane is empty too; each outcome's callbacks are told its fate once.
package completer

import (
	"context"
	"errors"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// DefaultLinger is the default Config.Linger.
//
// 20 ms: at 300 jobs/s a batch then carries about six outcomes instead of two, and the worker
// process spends 7-10% less CPU (docs/benchmarks.md); River's completer flushes every 50 ms.
const DefaultLinger = 20 * time.Millisecond

// spacingWeight is the weight, as a divisor, of the newest gap between two outcomes in the
// running estimate of their spacing.
const spacingWeight = 8

// spacing estimates how far apart outcomes arrive: an exponentially weighted moving average of the
// gaps between Adds, each gap capped at twice the linger so that a long idle spell is forgotten after
// a handful of outcomes rather than after hundreds.
type spacing struct {
	linger time.Duration
	est    time.Duration
	last   time.Time
	idle   bool // the latest outcome came after a gap of twice the linger or more
}

func newSpacing(linger time.Duration) spacing {
	return spacing{linger: linger, est: 2 * linger, idle: true}
}

// observe records an outcome arriving at now.
func (s *spacing) observe(now time.Time) {
	if !s.last.IsZero() {
		gap := min(max(now.Sub(s.last), 0), 2*s.linger)
		s.est += (gap - s.est) / spacingWeight
		s.idle = gap == 2*s.linger
	}
	s.last = now
}

// streaming reports whether outcomes arrive closer together than the linger, so that a batch waiting
// for the linger can expect company. The first outcome after an idle spell never waits.
func (s *spacing) streaming() bool { return s.est < s.linger && !s.idle }

// Item is one outcome to write, with a callback told whether it was applied.
type Item struct {
	Completion store.Completion
	// Done, if set, is called after the batch holding the item is written (applied reports whether the
	// job was still active with that attempt), or with err when the client stopped before it could be.
	Done func(applied bool, err error)
	// Callback, if set, is told the same as Done (both are called when both are set). It lets a
	// caller pass an object it already has instead of a closure made per outcome.
	Callback Finisher
	// Prompt marks an outcome that frees room other jobs may be waiting for (a job under a rate
	// key, whose limit counts it until its outcome is written): a batch holding one is written
	// without lingering, and a linger in progress ends when one arrives. Lingering on them capped a
	// key at its limit to MaxActive jobs per Linger, however short its jobs.
	Prompt bool
}

// Finisher is told the fate of an Item's outcome, as Item.Done is.
type Finisher interface {
	Finished(applied bool, err error)
}

// done tells the item's callbacks its outcome's fate.
func (it *Item) done(applied bool, err error) {
	if it.Done != nil {
		it.Done(applied, err)
	}
	if it.Callback != nil {
		it.Callback.Finished(applied, err)
	}
}

// Config configures a Completer.
type Config struct {
	// Finish writes a batch (store.Store.Finish). When it fails with a *store.FinishPartialError,
	// the outcomes whose results it knows are settled, and only the others are tried again: an
	// outcome written applies once, and sent again would be reported not applied.
	Finish       func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error)
	MaxBatchSize int // default 1000
	// MaxPending bounds the outcomes waiting to be written; Add waits while it is reached. Default
	// twice MaxBatchSize.
	MaxPending int
	// Linger is the longest a batch of fewer than MaxBatchSize/10 outcomes waits for more while
	// outcomes arrive closer together than Linger. Default DefaultLinger; negative never waits.
	Linger time.Duration
	Logger *slog.Logger
	// Transient reports whether an error of Finish may pass when the same batch is tried again: every
	// error but the store refusing the batch's own data (store.IsRefused), since an outcome given
	// up is a job that runs again. A batch the store refuses is split to isolate the outcomes it
	// refuses, and such an outcome, alone, is given up after a few tries, so that one outcome that
	// can never be written holds no other. Nil: every error is transient.
	Transient func(error) bool
	// Unavailable reports whether an error of Finish means the store cannot serve now
	// (store.IsUnavailable with the store, so that its own client library's errors count): such an
	// outage keeps a batch whole while it lasts. A transient error that is not one, and persists, has
	// its batch split to set the failing outcomes aside (see the package doc). A lock or statement
	// timeout never counts as an outage here. Nil: store.IsUnavailable without a store.
	Unavailable func(error) bool
}

// isolateAfter is how many times a batch fails with an error that is neither an outage nor a
// refusal before it is isolated: the first retry lets a deadlock or serialization failure pass.
const isolateAfter = 2

// maxIsolateInterval bounds the growing number of tries between two isolations of the outcomes a
// batch could neither write nor set aside.
const maxIsolateInterval = 16

// maxSetAside bounds the side lane: each outcome in it is a call per backoff. Past it, a failing
// outcome waits in its batch, and the client's later outcomes behind it, at the store's pace.
const maxSetAside = 16

// laneFirstBackoff is the wait before an outcome set aside is tried again on its own.
const laneFirstBackoff = 100 * time.Millisecond

// laneMaxBackoff caps an outcome's backoff in the side lane, lower than a batch's 5 s: once the
// lock it waits for is gone its job's lease has often run out (a heartbeat locks the same row), and
// the outcome must be written before the rescuer's next pass takes the job back. A try that meets
// the lock again waits for it up to lock_timeout, and there are at most maxSetAside such tries.
const laneMaxBackoff = time.Second

// refusedTries is how many times an outcome the store refuses alone (a non-transient error: its
// data at fault) is tried before it is given up: its job stays active until its lease expires and
// it is rescued. A transient error is tried again for as long as it lasts.
const refusedTries = 3

// Completer batches completions. Add is safe for concurrent use.
type Completer struct {
	cfg Config

	mu      sync.Mutex
	cond    *sync.Cond // signalled when outcomes arrive (or on close)
	space   *sync.Cond // broadcast when pending shrinks (or on close)
	pending []Item
	closed  bool
	exited  bool // Run has returned: nothing queued from now on would be written
	waiters int  // Adds waiting for room
	gaps    spacing
	// lingering is set while Run waits for company; Add then signals full once pending reaches
	// the batch target, and Close signals it too.
	lingering bool
	prompt    bool          // a pending outcome is Prompt: no linger until it is written
	full      chan struct{} // buffered(1)
	done      chan struct{}

	// The side lane: outcomes that keep failing alone, tried by runLane while Run goes on.
	lane        []laneItem
	laneRunning bool
	laneWG      sync.WaitGroup // runLane; Added to by Run only, waited for by Run
	laneWake    chan struct{}  // buffered(1): Close asks for the lane to be tried at once
	laneBackoff time.Duration  // laneFirstBackoff; tests hold the lane's retries with a longer one

	cs []store.Completion // write's buffer, owned by Run
}

// New returns a completer; Run starts it.
func New(cfg Config) *Completer {
	if cfg.MaxBatchSize <= 0 {
		cfg.MaxBatchSize = 1000
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 2 * cfg.MaxBatchSize
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Completer{cfg: cfg, gaps: newSpacing(max(cfg.Linger, 0)), full: make(chan struct{}, 1), done: make(chan struct{}),
		laneWake: make(chan struct{}, 1), laneBackoff: laneFirstBackoff}
	c.cond = sync.NewCond(&c.mu)
	c.space = sync.NewCond(&c.mu)
	return c
}

// Backlog returns how many outcomes wait to be written (queued, waiting for room in the queue, or
// set aside).
func (c *Completer) Backlog() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) + c.waiters + len(c.lane)
}

// Add queues one outcome. While MaxPending outcomes wait to be written it waits for room. An Add
// that comes after Close is refused (its outcome reported as not written); one that was already
// waiting when Close came is queued, and written by Run's final drain, unless Run has returned.
func (c *Completer) Add(it Item) {
	c.mu.Lock()
	waited := false
	for len(c.pending) >= c.cfg.MaxPending && !c.closed {
		waited = true
		c.waiters++
		c.space.Wait()
		c.waiters--
	}
	if c.exited || (c.closed && !waited) {
		c.mu.Unlock()
		it.done(false, context.Canceled)
		return
	}
	c.pending = append(c.pending, it)
	c.gaps.observe(time.Now())
	c.prompt = c.prompt || it.Prompt
	if c.lingering && (it.Prompt || len(c.pending) >= c.batchTarget()) {
		c.signalFull()
	}
	c.mu.Unlock()
	c.cond.Signal()
}

// batchTarget is the batch size that ends a linger at once.
func (c *Completer) batchTarget() int { return max(c.cfg.MaxBatchSize/10, 1) }

// signalFull ends a linger.
func (c *Completer) signalFull() {
	select {
	case c.full <- struct{}{}:
	default:
	}
}

// Close stops accepting outcomes; Run writes what is queued, and what is set aside, and returns.
func (c *Completer) Close() {
	c.mu.Lock()
	c.closed = true
	// The outcomes set aside are tried at once, rather than after their backoff, like the queue.
	for i := range c.lane {
		c.lane[i].next = time.Time{}
	}
	c.mu.Unlock()
	select {
	case c.laneWake <- struct{}{}:
	default:
	}
	c.signalFull()
	c.cond.Broadcast()
	c.space.Broadcast()
}

// Done is closed when Run has returned.
func (c *Completer) Done() <-chan struct{} { return c.done }

// Run writes batches until Close has been called and everything queued or set aside is written, or
// ctx is done (what is left then is reported to its callbacks as not written; the jobs' leases will
// expire and the rescuer will run them again).
func (c *Completer) Run(ctx context.Context) {
	defer close(c.done)
	// The side lane ends when it is empty or ctx is done; Run returns after it, so that Done means
	// every outcome's fate is told.
	defer c.laneWG.Wait()
	stop := context.AfterFunc(ctx, func() { c.cond.Broadcast() })
	defer stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	var spare []Item // a buffer for the next batch or queue, owned by Run
	for {
		c.mu.Lock()
		// After Close, Adds that were waiting for room still come in: wait for them too.
		for len(c.pending) == 0 && (!c.closed || c.waiters > 0) && ctx.Err() == nil {
			c.cond.Wait()
		}
		if ctx.Err() != nil || (c.closed && len(c.pending) == 0 && c.waiters == 0) {
			left := c.pending
			c.pending = nil
			c.closed, c.exited = true, true
			c.mu.Unlock()
			c.space.Broadcast()
			for i := range left {
				left[i].done(false, context.Cause(ctx))
			}
			return
		}
		if c.cfg.Linger > 0 && len(c.pending) < c.batchTarget() && c.gaps.streaming() && !c.closed && !c.prompt {
			// Outcomes keep arriving: let a few more gather so one statement writes many.
			c.lingering = true
			select {
			case <-c.full: // a stale signal from an earlier linger
			default:
			}
			c.mu.Unlock()
			linger.Reset(c.cfg.Linger)
			select {
			case <-linger.C:
			case <-c.full:
				linger.Stop()
			case <-ctx.Done():
				linger.Stop()
			}
			c.mu.Lock()
			c.lingering = false
			if ctx.Err() != nil {
				c.mu.Unlock()
				continue // report what is left as not written
			}
		}
		var batch []Item
		if n := len(c.pending); n <= c.cfg.MaxBatchSize {
			// The common case: the whole queue is the batch. The queue takes the spare buffer, so
			// no batch is copied, nor a buffer allocated per batch.
			batch, c.pending = c.pending, spare[:0]
			c.prompt = false
		} else {
			batch = append(spare[:0], c.pending[:c.cfg.MaxBatchSize]...)
			c.pending = append(c.pending[:0], c.pending[c.cfg.MaxBatchSize:]...)
			c.prompt = slices.ContainsFunc(c.pending, func(it Item) bool { return it.Prompt })
		}
		c.mu.Unlock()
		c.space.Broadcast()
		c.write(ctx, batch)
		clear(batch) // drop the written items' callbacks
		spare = batch[:0]
	}
}

// write applies one batch, retrying with backoff while the store fails and ctx is live.
func (c *Completer) write(ctx context.Context, batch []Item) {
	// Only Run writes, one batch at a time, so the completions' buffer is reused: a Completion is
	// large, and a fresh slice per batch was much of a drain's garbage.
	cs := c.cs[:0]
	for i := range batch {
		cs = append(cs, batch[i].Completion)
	}
	defer func() {
		clear(cs) // drop the results and errors it points to
		c.cs = cs[:0]
	}()
	c.writeAll(ctx, batch, cs)
}

// writeAll is write with the batch's completions cs (cs[i] is batch[i]'s).
func (c *Completer) writeAll(ctx context.Context, batch []Item, cs []store.Completion) {
	backoff := 50 * time.Millisecond
	isolateAt := isolateAfter
	for tries := 1; ; tries++ {
		res, err := c.cfg.Finish(ctx, cs)
		if err == nil {
			report(batch, res)
			return
		}
		var partial *store.FinishPartialError
		if errors.As(err, &partial) && len(partial.Results) == len(batch) && len(partial.Known) == len(batch) {
			// Part of the batch was written: those outcomes are settled now, as sending them again
			// would have them reported not applied; only the others are tried again.
			batch, cs = settleKnown(batch, cs, partial)
			if len(batch) == 0 {
				c.cfg.Logger.Error("pronto: job outcomes written, but the store reported an error", "err", err)
				return
			}
		}
		if ctx.Err() != nil {
			for i := range batch {
				batch[i].done(false, err)
			}
			return
		}
		if !c.transient(err) {
			if len(batch) > 1 {
				// Perhaps one outcome's data: each half on its own, so the others are written.
				mid := len(batch) / 2
				c.writeAll(ctx, batch[:mid], cs[:mid])
				c.writeAll(ctx, batch[mid:], cs[mid:])
				return
			}
			if tries == refusedTries {
				c.cfg.Logger.Error("pronto: the store refuses a job's outcome; given up, the job will be rescued when its lease expires",
					"job", cs[0].ID, "attempt", cs[0].Attempt, "err", err)
				batch[0].done(false, err)
				return
			}
		} else if tries >= isolateAt && !c.outage(err) {
			// Not the store down, yet the batch keeps failing: perhaps some of its rows only (locked,
			// timing out). Write what can be written, and set the failing outcomes aside, so that
			// they no longer hold every later outcome of the client.
			batch, cs = c.isolate(ctx, batch, cs, err)
			if len(batch) == 0 {
				return
			}
			// What could be neither written nor set aside is tried as one batch again; an
			// isolation's failing calls are spent less and less often while the error lasts.
			isolateAt = tries + min(tries, maxIsolateInterval)
		}
		c.cfg.Logger.Error("pronto: writing job outcomes failed; retrying", "jobs", len(batch), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// transient reports whether err may pass when the same outcomes are tried again (Config.Transient).
func (c *Completer) transient(err error) bool {
	return c.cfg.Transient == nil || c.cfg.Transient(err)
}

// outage reports whether err means the store cannot serve at all now, whatever the outcomes: then
// the batch waits whole, as splitting it would only multiply the failing calls. A lock or
// statement timeout is the one statement's, perhaps of one row, even though store.IsUnavailable
// counts it (a migration's table lock fails every statement, and an operator's row lock one job's).
func (c *Completer) outage(err error) bool {
	if store.ConditionOf(nil, err).PerRequest() {
		return false
	}
	if c.cfg.Unavailable != nil {
		return c.cfg.Unavailable(err)
	}
	return store.IsUnavailable(nil, err)
}

// isolate writes batch, which keeps failing with err (neither an outage nor a refusal), by halves:
// a half that is written is reported at once, a half that fails alike is split again, and an
// outcome that fails alone is set aside (see setAside). It returns, in new slices, the outcomes it
// could neither write nor set aside: after an outage or the end of ctx, with its failing calls
// spent, or with the side lane full.
func (c *Completer) isolate(ctx context.Context, batch []Item, cs []store.Completion, err error) ([]Item, []store.Completion) {
	c.cfg.Logger.Warn("pronto: a batch of job outcomes keeps failing; writing it by halves to set the failing ones aside",
		"jobs", len(batch), "err", err)
	// Enough failing calls to find two failing outcomes among the batch; a failure of every
	// outcome (a migration's table lock) costs no more than that per isolation.
	iso := isolation{c: c, budget: 2*bits.Len(uint(len(batch))) + 2}
	iso.split(ctx, batch, cs, err)
	return iso.kept, iso.keptCs
}

// isolation is one isolate pass.
type isolation struct {
	c      *Completer
	budget int  // failing calls left to spend on splitting
	halted bool // an outage, or ctx ended: the rest is kept whole, untried
	kept   []Item
	keptCs []store.Completion
}

// split handles batch, which failed with err.
func (iso *isolation) split(ctx context.Context, batch []Item, cs []store.Completion, err error) {
	if len(batch) == 1 && !iso.halted && iso.c.setAside(ctx, batch[0], err) {
		return
	}
	if len(batch) == 1 || iso.halted || iso.budget <= 0 {
		iso.keep(batch, cs)
		return
	}
	mid := len(batch) / 2
	iso.try(ctx, batch[:mid], cs[:mid])
	iso.try(ctx, batch[mid:], cs[mid:])
}

// keep returns batch to the caller, to be retried whole.
func (iso *isolation) keep(batch []Item, cs []store.Completion) {
	iso.kept = append(iso.kept, batch...)
	iso.keptCs = append(iso.keptCs, cs...)
}

// try writes one part of the batch being isolated.
func (iso *isolation) try(ctx context.Context, batch []Item, cs []store.Completion) {
	if iso.halted {
		iso.keep(batch, cs)
		return
	}
	c := iso.c
	res, err := c.cfg.Finish(ctx, cs)
	if err == nil {
		report(batch, res)
		return
	}
	var partial *store.FinishPartialError
	if errors.As(err, &partial) && len(partial.Results) == len(batch) && len(partial.Known) == len(batch) {
		batch, cs = settleKnown(batch, cs, partial)
		if len(batch) == 0 {
			c.cfg.Logger.Error("pronto: job outcomes written, but the store reported an error", "err", err)
			return
		}
	}
	switch {
	case ctx.Err() != nil || c.outage(err):
		// The caller retries the rest whole (or reports it, once ctx is done).
		iso.halted = true
	case !c.transient(err):
		// The store refuses some outcome's data: the refusal's own path isolates it.
		c.writeAll(ctx, batch, cs)
		return
	default:
		iso.budget--
	}
	iso.split(ctx, batch, cs, err)
}

// setAside moves an outcome that keeps failing alone to the side lane, where it is tried on its
// own, with a backoff of its own, while Run goes on writing the outcomes that come after it. It
// reports false when the lane is full: the outcome then waits in its batch as before.
func (c *Completer) setAside(ctx context.Context, it Item, err error) bool {
	c.mu.Lock()
	if len(c.lane) >= maxSetAside {
		c.mu.Unlock()
		return false
	}
	c.lane = append(c.lane, laneItem{it: it, next: time.Now().Add(c.laneBackoff), backoff: c.laneBackoff})
	if !c.laneRunning {
		c.laneRunning = true
		c.laneWG.Add(1)
		go c.runLane(ctx)
	}
	c.mu.Unlock()
	c.cfg.Logger.Warn("pronto: a job's outcome keeps failing; retrying it on its own so that other outcomes are written",
		"job", it.Completion.ID, "attempt", it.Completion.Attempt, "err", err)
	return true
}

// laneItem is an outcome set aside.
type laneItem struct {
	it       Item
	next     time.Time // when it is tried next
	backoff  time.Duration
	refusals int // tries the store refused its data
}

// runLane tries the outcomes set aside until each is written (or refused refusedTries times, as in
// a batch), or ctx ends; it returns when the lane is empty.
func (c *Completer) runLane(ctx context.Context) {
	defer c.laneWG.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		c.mu.Lock()
		if len(c.lane) == 0 || ctx.Err() != nil {
			left := c.lane
			c.lane, c.laneRunning = nil, false
			c.mu.Unlock()
			for i := range left {
				left[i].it.done(false, context.Cause(ctx))
			}
			return
		}
		now := time.Now()
		i, wake := -1, time.Time{}
		for j := range c.lane {
			if !now.Before(c.lane[j].next) {
				i = j
				break
			}
			if wake.IsZero() || c.lane[j].next.Before(wake) {
				wake = c.lane[j].next
			}
		}
		if i < 0 {
			c.mu.Unlock()
			timer.Reset(wake.Sub(now))
			select {
			case <-timer.C:
			case <-c.laneWake:
				timer.Stop()
			case <-ctx.Done():
				timer.Stop()
			}
			continue
		}
		it := c.lane[i].it
		c.mu.Unlock()

		settled, err := c.writeAlone(ctx, &it)
		c.mu.Lock()
		li := &c.lane[i] // only this goroutine removes from the lane, so i still names it
		if !settled && err != nil && !c.transient(err) {
			li.refusals++
			settled = li.refusals == refusedTries
		}
		backoff := li.backoff
		if settled {
			c.lane = slices.Delete(c.lane, i, i+1)
		} else {
			li.next = time.Now().Add(backoff)
			li.backoff = min(backoff*2, laneMaxBackoff)
		}
		c.mu.Unlock()
		switch {
		case settled && err != nil:
			c.cfg.Logger.Error("pronto: the store refuses a job's outcome; given up, the job will be rescued when its lease expires",
				"job", it.Completion.ID, "attempt", it.Completion.Attempt, "err", err)
			it.done(false, err)
		case !settled && ctx.Err() == nil:
			c.cfg.Logger.Error("pronto: writing job outcomes failed; retrying", "jobs", 1,
				"job", it.Completion.ID, "attempt", it.Completion.Attempt, "err", err, "retry_in", backoff)
		}
	}
}

// writeAlone writes one outcome set aside. It reports whether its fate is settled (written, and
// told to its callbacks), and else the error.
func (c *Completer) writeAlone(ctx context.Context, it *Item) (bool, error) {
	res, err := c.cfg.Finish(ctx, []store.Completion{it.Completion})
	if err == nil {
		report([]Item{*it}, res)
		return true, nil
	}
	var partial *store.FinishPartialError
	if errors.As(err, &partial) && len(partial.Known) == 1 && len(partial.Results) == 1 &&
		partial.Known[0] && partial.Results[0].ID == it.Completion.ID {
		c.cfg.Logger.Error("pronto: job outcomes written, but the store reported an error", "err", err)
		it.done(partial.Results[0].Applied, nil)
		return true, nil
	}
	return false, err
}

// report tells each item of batch its result in res.
func report(batch []Item, res []store.FinishResult) {
	// Stores answer in the completions' order; should one not, the results are matched by id
	// instead.
	var applied map[string]bool
	if len(res) != len(batch) {
		applied = appliedByID(res)
	}
	for i := range batch {
		it := &batch[i]
		var ok bool
		switch {
		case applied != nil:
			ok = applied[it.Completion.ID]
		case res[i].ID == it.Completion.ID:
			ok = res[i].Applied
		default:
			applied = appliedByID(res)
			ok = applied[it.Completion.ID]
		}
		it.done(ok, nil)
	}
}

// settleKnown tells the items of batch whose result p knows their result, and returns the others
// with their completions, in order, in new slices: batch and cs are Run's buffers.
func settleKnown(batch []Item, cs []store.Completion, p *store.FinishPartialError) ([]Item, []store.Completion) {
	var restItems []Item
	var restCs []store.Completion
	for i := range batch {
		if p.Known[i] && p.Results[i].ID == cs[i].ID {
			batch[i].done(p.Results[i].Applied, nil)
			continue
		}
		restItems = append(restItems, batch[i])
		restCs = append(restCs, cs[i])
	}
	return restItems, restCs
}

// appliedByID maps the results of a Finish by job id.
func appliedByID(res []store.FinishResult) map[string]bool {
	applied := make(map[string]bool, len(res))
	for _, r := range res {
		applied[r.ID] = r.Applied
	}
	return applied
}
