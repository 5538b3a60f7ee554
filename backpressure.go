package pronto

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// Inserts into unbounded queues never read a depth. The price is precision: jobs finished since the
// last read still count (the bound is met early, never late, by one client), and what other clients
// inserted in the meantime is not seen yet, so several clients together may overshoot a bound by what
// they insert within depthEvery.

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
}

type queueDepth struct {
	n  int64
	at time.Time
}

// checkBounds refuses ps when one of its bounded queues would go beyond its maximum depth, and
// otherwise counts ps into the queues' depths.
func (c *Client) checkBounds(ctx context.Context, ps []*store.InsertParams) error {
	qb, ok := c.store.(store.QueueBounder)
	if !ok {
		return nil
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
			bp.bounds = bounds
		}
		bp.boundsAt = now
	}
	if len(bp.bounds) == 0 {
		return nil
	}
	var adding map[string]int
	for _, p := range ps {
		if _, bounded := bp.bounds[p.Queue]; bounded {
			if adding == nil {
				adding = map[string]int{}
			}
			adding[p.Queue]++
		}
	}
	if adding == nil {
		return nil
	}
	var stale []string
	for q := range adding {
		if d := bp.depths[q]; d == nil || now.Sub(d.at) >= depthEvery {
			stale = append(stale, q)
		}
	}
	if bp.depths == nil {
		bp.depths = map[string]*queueDepth{}
	}
	if len(stale) > 0 {
		depths, err := qb.QueueDepths(ctx, stale)
		if err != nil {
			return fmt.Errorf("counting the depth of bounded queues %v: %w", stale, err)
		}
		for _, q := range stale {
			bp.depths[q] = &queueDepth{n: depths[q], at: now}
		}
	}
	for q, n := range adding {
		if d, max := bp.depths[q].n, bp.bounds[q]; d+int64(n) > max {
			return &QueueFullError{Queue: q, Depth: d, MaxDepth: max, Adding: n}
		}
	}
	for q, n := range adding {
		bp.depths[q].n += int64(n)
	}
	return nil
}

// QueueSetMaxDepth bounds queue: an insert that would take it beyond maxDepth jobs that have not
// finished fails with ErrQueueFull. 0 removes the bound. Every client sees a new bound within about a
// second. The store must implement store.QueueBounder (all of pronto's stores do).
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
