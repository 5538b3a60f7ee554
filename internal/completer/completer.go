// Package completer writes the outcomes of job attempts to the store in batches, off the workers'
// path: a worker hands its outcome over and its slot is free at once. Batches form naturally: while one
// batch is being written, new outcomes gather for the next, up to a size bound; when outcomes arrive
// quickly a small batch also waits FlushWindow for company. An idle system writes each outcome
// immediately and a busy one writes hundreds per statement.
//
// The queue is bounded (Config.MaxPending): when the store writes outcomes more slowly than the
// workers produce them, Add waits for room, so the workers slow down to the store's pace instead of
// piling outcomes up in memory (and their jobs up as active in the database).
package completer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// FlushWindow is how long a small batch waits for company when outcomes are arriving quickly (the
// previous flush ended less than busyWindow ago). An idle system writes each outcome at once.
const FlushWindow = time.Millisecond

const busyWindow = 5 * time.Millisecond

// Item is one outcome to write, with a callback told whether it was applied.
type Item struct {
	Completion store.Completion
	// Done, if set, is called after the batch holding the item is written (applied reports whether the
	// job was still active with that attempt), or with err when the client stopped before it could be.
	Done func(applied bool, err error)
}

// Config configures a Completer.
type Config struct {
	Finish       func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error)
	MaxBatchSize int // default 1000
	// MaxPending bounds the outcomes waiting to be written; Add waits while it is reached. Default
	// twice MaxBatchSize.
	MaxPending int
	Logger     *slog.Logger
}

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
	done    chan struct{}
}

// New returns a completer; Run starts it.
func New(cfg Config) *Completer {
	if cfg.MaxBatchSize <= 0 {
		cfg.MaxBatchSize = 1000
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 2 * cfg.MaxBatchSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Completer{cfg: cfg, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.space = sync.NewCond(&c.mu)
	return c
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
		if it.Done != nil {
			it.Done(false, context.Canceled)
		}
		return
	}
	c.pending = append(c.pending, it)
	c.mu.Unlock()
	c.cond.Signal()
}

// Close stops accepting outcomes; Run writes what is queued and returns.
func (c *Completer) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cond.Broadcast()
	c.space.Broadcast()
}

// Done is closed when Run has returned.
func (c *Completer) Done() <-chan struct{} { return c.done }

// Run writes batches until Close has been called and everything queued is written, or ctx is done
// (what is left then is reported to its callbacks as not written; the jobs' leases will expire and the
// rescuer will run them again).
func (c *Completer) Run(ctx context.Context) {
	defer close(c.done)
	stop := context.AfterFunc(ctx, func() { c.cond.Broadcast() })
	defer stop()
	var lastFlush time.Time
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
			for _, it := range left {
				if it.Done != nil {
					it.Done(false, context.Cause(ctx))
				}
			}
			return
		}
		if len(c.pending) < c.cfg.MaxBatchSize/10 && time.Since(lastFlush) < busyWindow && !c.closed {
			// Busy: outcomes keep arriving. Let a few more gather so one statement writes many.
			c.mu.Unlock()
			time.Sleep(FlushWindow)
			c.mu.Lock()
		}
		n := min(len(c.pending), c.cfg.MaxBatchSize)
		batch := make([]Item, n)
		copy(batch, c.pending[:n])
		c.pending = append(c.pending[:0], c.pending[n:]...)
		c.mu.Unlock()
		c.space.Broadcast()
		c.write(ctx, batch)
		lastFlush = time.Now()
	}
}

// write applies one batch, retrying with backoff while the store fails and ctx is live.
func (c *Completer) write(ctx context.Context, batch []Item) {
	cs := make([]store.Completion, len(batch))
	for i, it := range batch {
		cs[i] = it.Completion
	}
	backoff := 50 * time.Millisecond
	for {
		res, err := c.cfg.Finish(ctx, cs)
		if err == nil {
			applied := make(map[string]bool, len(res))
			for _, r := range res {
				applied[r.ID] = r.Applied
			}
			for _, it := range batch {
				if it.Done != nil {
					it.Done(applied[it.Completion.ID], nil)
				}
			}
			return
		}
		if ctx.Err() != nil {
			for _, it := range batch {
				if it.Done != nil {
					it.Done(false, err)
				}
			}
			return
		}
		c.cfg.Logger.Error("pronto: writing job outcomes failed; retrying", "jobs", len(batch), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
