// Package finishbatch merges concurrent single outcomes (remote acks and nacks: many OJS workers
// each reporting one job) into one store Finish for all of them. When fewer than MaxFlights writes
// are in flight an outcome is written at once, so a lone worker waits for nothing; while writes are
// in flight, the outcomes that arrive meanwhile gather and go together in the next. Every caller
// learns whether its own outcome was applied.
//
// A store Finish applies each completion on its own terms (fenced by attempt and claim token) and
// fails only as a whole, for a reason that is not one completion's (a dead database). A batch that
// fails is written again outcome by outcome, so that each caller gets its own answer.
//
// A caller whose context ends stops waiting at once; its outcome is written if its write had
// already started, or is dropped if not.
package finishbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Defaults of Config.
const (
	DefaultMaxBatch = 500
	// DefaultMaxFlights is one write at a time, for the reason insertbatch gives.
	DefaultMaxFlights = 1
)

// writeTimeout bounds one write: outcomes are written whether or not their callers still wait,
// but not forever against a database that does not answer.
const writeTimeout = 30 * time.Second

// Config configures a Batcher.
type Config struct {
	// Finish applies completions (store.Store.Finish).
	Finish func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error)
	// MaxBatch is the most outcomes one write carries (default DefaultMaxBatch).
	MaxBatch int
	// MaxFlights is the most writes in flight at once (default DefaultMaxFlights).
	MaxFlights int
}

// Batcher merges concurrent outcomes. Its zero value is not usable; see New. It starts no goroutine
// that outlives the writes in flight, so it needs no stopping.
type Batcher struct {
	cfg Config

	mu      sync.Mutex
	waiting []*call
	flights int
}

type call struct {
	c       store.Completion
	done    chan struct{} // closed when applied or err is set
	applied bool
	err     error
	left    bool // its caller stopped waiting before a write took it
}

// New returns a Batcher.
func New(cfg Config) *Batcher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxFlights <= 0 {
		cfg.MaxFlights = DefaultMaxFlights
	}
	return &Batcher{cfg: cfg}
}

// Finish applies c, merged with the outcomes other callers hand over meanwhile, and reports whether
// it was applied (the job was still active under c's attempt and token).
func (b *Batcher) Finish(ctx context.Context, c store.Completion) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	cl := &call{c: c, done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, cl)
	var start []*call
	if b.flights < b.cfg.MaxFlights {
		b.flights++
		start = b.take()
	}
	b.mu.Unlock()
	if start != nil {
		go b.fly(start)
	}
	select {
	case <-cl.done:
		return cl.applied, cl.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-cl.done:
		return cl.applied, cl.err
	default:
	}
	cl.left = true // dropped if still waiting; written anyway if taken
	return false, ctx.Err()
}

// take removes up to MaxBatch waiting calls, oldest first, at most one per job: two outcomes of
// one job in one write would both be reported as the one applied. b.mu is held.
func (b *Batcher) take() []*call {
	var batch []*call
	jobs := make(map[string]struct{}, min(len(b.waiting), b.cfg.MaxBatch))
	kept := b.waiting[:0]
	for _, c := range b.waiting {
		_, twice := jobs[c.c.ID]
		switch {
		case c.left:
		case len(batch) < b.cfg.MaxBatch && !twice:
			batch = append(batch, c)
			jobs[c.c.ID] = struct{}{}
		default:
			kept = append(kept, c)
		}
	}
	clear(b.waiting[len(kept):])
	b.waiting = kept
	return batch
}

// fly writes batch, then every batch that gathered meanwhile, until none waits.
func (b *Batcher) fly(batch []*call) {
	for {
		if len(batch) > 0 {
			b.write(batch)
		}
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.flights--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// write applies batch and tells every caller its outcome; a batch the store fails as a whole is
// written again call by call.
func (b *Batcher) write(batch []*call) {
	cs := make([]store.Completion, len(batch))
	for i, c := range batch {
		cs[i] = c.c
	}
	// Taken outcomes are written even when their callers leave: a worker's report is not dropped
	// because its HTTP request timed out.
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	res, err := b.cfg.Finish(ctx, cs)
	if err == nil && len(res) != len(cs) {
		err = fmt.Errorf("finish of %d outcomes returned %d results", len(cs), len(res))
	}
	var partial *store.FinishPartialError
	if errors.As(err, &partial) && len(partial.Known) == len(batch) && len(partial.Results) == len(batch) {
		// Part of the batch was written (a store that cannot write it in one transaction): those
		// callers get their result, as writing them again would report them not applied; only the
		// others are written again.
		var rest []*call
		b.mu.Lock()
		for i, c := range batch {
			if partial.Known[i] && partial.Results[i].ID == c.c.ID {
				c.applied = partial.Results[i].Applied
				close(c.done)
				continue
			}
			rest = append(rest, c)
		}
		b.mu.Unlock()
		if len(rest) < len(batch) {
			for _, c := range rest {
				b.write([]*call{c})
			}
			return
		}
	}
	if err != nil && len(batch) > 1 {
		for _, c := range batch {
			b.write([]*call{c})
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range batch {
		if err == nil {
			c.applied = res[i].Applied
		}
		c.err = err
		close(c.done)
	}
}
