// Package insertbatch merges concurrent single-job inserts into batched store writes (group
// commit). A caller hands its job over and waits for its own outcome. When fewer than MaxFlights
// writes are in flight (by default: none) the job is written at once, by the caller itself when it is alone: there is
// no window to wait out and no goroutine to wake, so a lone caller is as fast as a direct insert. While writes are in flight, the jobs handed over meanwhile gather
// and go together in the next write, up to a size bound. Under load each statement carries as many
// jobs as arrived during the previous one, and the statements (and transactions) per job fall.
//
// A batch holds the jobs of one queue. Every caller gets its own outcome. A store insert is atomic,
// so one bad job (a duplicate id, a unique conflict under the reject policy, a job the store
// refuses) fails the whole batch; the batch is then written again in halves, down to that job
// alone, so that only its caller gets the error.
//
// A caller whose context ends stops waiting at once (a lone caller writing its own job, when the
// store's insert returns, which ends with the context). If its job was not yet taken into a write it
// is never written; if it was, the write goes on for the others and the job may be stored. A write
// is cancelled only when every caller in it has stopped waiting.
package insertbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/pronto-jobs/pronto/store"
)

// Defaults of Config.
const (
	DefaultMaxBatch = 500
	// DefaultMaxFlights is one write at a time: under load, each write then carries every job that
	// arrived during the previous one, and the fewer, larger writes cost the database and the
	// client less than two overlapping ones did (docs/architecture.md, "Remote fetches and outcomes"), while
	// a lone caller still writes at once.
	DefaultMaxFlights = 1
)

// InsertFunc writes jobs atomically and returns them in the order given (store.Store.Insert).
type InsertFunc func(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error)

// Config configures a Batcher.
type Config struct {
	// Insert writes one batch.
	Insert InsertFunc
	// MaxBatch is the most jobs one write carries (default DefaultMaxBatch).
	MaxBatch int
	// MaxFlights is the most writes in flight at once (default DefaultMaxFlights). A job handed over
	// while fewer are in flight starts a write of its own at once.
	MaxFlights int
}

// Batcher merges concurrent inserts. Its zero value is not usable; see New. It starts no goroutine
// that outlives the writes in flight, so it needs no stopping.
type Batcher struct {
	insert     InsertFunc
	maxBatch   int
	maxFlights int

	mu      sync.Mutex
	queue   []*call // handed over, not yet taken into a write
	flights int     // writes in flight; > 0 whenever queue is not empty
}

// New returns a Batcher.
func New(cfg Config) *Batcher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxFlights <= 0 {
		cfg.MaxFlights = DefaultMaxFlights
	}
	return &Batcher{insert: cfg.Insert, maxBatch: cfg.MaxBatch, maxFlights: cfg.MaxFlights}
}

// call states, guarded by Batcher.mu.
const (
	waiting   = iota // in the queue
	taken            // in a write
	delivered        // its outcome is set
	abandoned        // its caller stopped waiting
)

type call struct {
	p     *store.InsertParams
	done  chan struct{} // closed when job or err is set
	job   *store.Job
	err   error
	state int
	f     *flight // set when taken
}

// flight is one write and its retries; its context ends when every caller in it stopped waiting.
type flight struct {
	ctx    context.Context
	cancel context.CancelFunc
	live   int // callers still waiting for their outcome, guarded by Batcher.mu
}

// release counts one caller of f out: its outcome is set or it stopped waiting. Batcher.mu is held.
func (f *flight) release() {
	if f.live--; f.live == 0 {
		f.cancel()
	}
}

// Insert writes p, merged with the jobs other callers hand over meanwhile, and returns the job as
// stored (or the existing job with Duplicate set, under the ignore policy), or this job's own error.
// When ctx ends first it returns ctx's error; the job is then stored only if its write had already
// started.
func (b *Batcher) Insert(ctx context.Context, p *store.InsertParams) (*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &call{p: p, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	var start []*call
	if b.flights < b.maxFlights {
		b.flights++
		start = b.take()
	}
	b.mu.Unlock()
	if len(start) == 1 && start[0] == c {
		// Alone, the caller writes its job itself, under its own context (it is the write's only
		// caller), and a goroutine starts only for what gathered meanwhile: handing a lone job to a
		// new goroutine woke an idle thread, about a tenth of a millisecond on an idle 2-core VM, the
		// largest cost of a single insert after its round trip.
		b.write(ctx, start)
		b.land()
		return c.job, c.err
	}
	if start != nil {
		go b.fly(start)
	}
	select {
	case <-c.done:
		return c.job, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	select {
	case <-c.done: // the outcome came in meanwhile: it counts
		b.mu.Unlock()
		return c.job, c.err
	default:
	}
	if c.state == taken {
		c.f.release()
	}
	c.state = abandoned
	b.mu.Unlock()
	return nil, ctx.Err()
}

// take removes from the queue up to maxBatch waiting calls of one queue (the queue of the oldest
// waiting call) and marks them taken by a new flight; calls abandoned while waiting are dropped and
// calls of other queues keep their place. b.mu is held. It may return an empty batch.
//
// A batch holds one queue's jobs because that is what every store writes atomically: the Redis
// store writes each queue of a batch in its own script and undoes the others when one refuses,
// leaving a moment in which a job of the undone queues could be claimed.
func (b *Batcher) take() []*call {
	var batch []*call
	queue := ""
	kept := b.queue[:0]
	for _, c := range b.queue {
		switch {
		case c.state != waiting:
		case len(batch) == 0:
			queue = c.p.Queue
			batch = append(batch, c)
		case c.p.Queue == queue && len(batch) < b.maxBatch:
			batch = append(batch, c)
		default:
			kept = append(kept, c)
		}
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &flight{ctx: ctx, cancel: cancel, live: len(batch)}
	for _, c := range batch {
		c.state, c.f = taken, f
	}
	return batch
}

// fly writes batch, then every batch that gathered meanwhile, until the queue is empty.
func (b *Batcher) fly(batch []*call) {
	for {
		if len(batch) > 0 {
			b.write(batch[0].f.ctx, batch)
		}
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flights--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// land ends a write made by its caller (see Insert): what gathered meanwhile flies on in a goroutine
// of its own, in the same flight slot.
func (b *Batcher) land() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.flights--
		b.mu.Unlock()
		return
	}
	batch := b.take()
	b.mu.Unlock()
	go b.fly(batch)
}

// write stores batch and hands every caller its outcome. A batch the store refuses as a whole is
// written again in parts: halves, when the error is one a single job causes (an id already taken, a
// unique conflict, a job the store refuses), so one bad job among n costs about 2·log2(n) writes,
// not n; otherwise job by job, so each caller gets its own attempt. Parts are written in order, so
// the earlier of two jobs of one batch holding the same unique key wins, as it would alone.
func (b *Batcher) write(ctx context.Context, batch []*call) {
	if len(batch) == 0 {
		return
	}
	ps := make([]*store.InsertParams, len(batch))
	for i, c := range batch {
		ps[i] = c.p
	}
	jobs, err := b.insert(ctx, ps)
	if err == nil && len(jobs) != len(ps) {
		err = fmt.Errorf("insert of %d jobs returned %d", len(ps), len(jobs))
	}
	switch {
	case err == nil:
		for i, c := range batch {
			b.deliver(c, jobs[i], nil)
		}
	case len(batch) == 1:
		b.deliver(batch[0], nil, err)
	case oneJobsFault(err):
		half := len(batch) / 2
		b.write(ctx, b.live(batch[:half]))
		b.write(ctx, b.live(batch[half:]))
	default:
		for _, c := range batch {
			b.write(ctx, b.live([]*call{c}))
		}
	}
}

// oneJobsFault reports whether err is one a single job of a batch causes.
func oneJobsFault(err error) bool {
	return errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrUniqueConflict) ||
		errors.Is(err, store.ErrInvalidParams)
}

// live returns the calls of batch whose callers still wait, so that a retry leaves the others out.
func (b *Batcher) live(batch []*call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := batch[:0:0]
	for _, c := range batch {
		if c.state == taken {
			out = append(out, c)
		}
	}
	return out
}

func (b *Batcher) deliver(c *call, j *store.Job, err error) {
	if j == nil && err == nil {
		err = errors.New("insert returned no job")
	}
	b.mu.Lock()
	if c.state == taken {
		c.state = delivered
		c.f.release()
	}
	c.job, c.err = j, err
	close(c.done)
	b.mu.Unlock()
}
