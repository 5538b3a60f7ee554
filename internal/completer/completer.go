// Package completer writes the outcomes of job attempts to the store in batches, off the workers'
// path: a worker hands its outcome over and its slot is free at once. Batches form naturally: while one
// batch is being written, new outcomes gather for the next, up to a size bound; when outcomes arrive
// quickly a small batch also waits FlushWindow for company. An idle system writes each outcome
// immediately and a busy one writes hundreds per statement.
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
	Logger       *slog.Logger
}

// Completer batches completions. Add is safe for concurrent use.
type Completer struct {
	cfg Config

	mu      sync.Mutex
	cond    *sync.Cond
	pending []Item
	closed  bool
	done    chan struct{}
}

// New returns a completer; Run starts it.
func New(cfg Config) *Completer {
	if cfg.MaxBatchSize <= 0 {
		cfg.MaxBatchSize = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Completer{cfg: cfg, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Add queues one outcome. It never blocks on the database.
func (c *Completer) Add(it Item) {
	c.mu.Lock()
	if c.closed {
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
		for len(c.pending) == 0 && !c.closed && ctx.Err() == nil {
			c.cond.Wait()
		}
		if ctx.Err() != nil || (c.closed && len(c.pending) == 0) {
			left := c.pending
			c.pending = nil
			c.closed = true
			c.mu.Unlock()
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
