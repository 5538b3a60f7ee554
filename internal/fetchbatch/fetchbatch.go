// Package fetchbatch merges concurrent claims of one queue made for different workers (remote
// fetches: many OJS workers each asking for a job or a few) into one store claim for all of them
// (store.ClaimParams.WorkerIDs). When fewer than MaxFlights claims of the queue are in flight, a
// fetch claims at once: a lone worker waits for nothing. While claims are in flight, the fetches
// that arrive meanwhile gather and share the next claim, so under load one statement serves as many
// workers as asked during the previous one.
//
// Every job a shared claim takes is recorded under the worker it goes to, so heartbeats, outcomes
// and the admin API see exactly what an unshared claim would give. A fetch whose caller stops
// waiting after its claim started gets nothing, and the jobs claimed for it are released back to
// available at once (store.ReleaseClaimed) rather than left to wait out their lease.
package fetchbatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Defaults of Config.
const (
	DefaultMaxSlots = 1000
	// DefaultMaxFlights is one claim of a queue at a time, for the reason insertbatch gives.
	DefaultMaxFlights = 1
)

// Config configures a Batcher.
type Config struct {
	// Claim claims for several workers at once (store.Store.Claim with WorkerIDs set). The params
	// it is given leave OnHeldBack unset: a claim merges several callers' fetches, so the jobs it
	// holds back for their rate limit belong to none of them; Claim sets it to report them.
	Claim func(ctx context.Context, p store.ClaimParams) ([]*store.Job, error)
	// Release gives back jobs claimed for a caller that stopped waiting (store.ReleaseClaimed).
	Release func(ctx context.Context, jobs []*store.Job)
	// MaxSlots is the most jobs one claim asks for (default DefaultMaxSlots). A fetch asking for
	// more than this claims alone.
	MaxSlots int
	// MaxFlights is the most claims of one queue in flight at once (default DefaultMaxFlights).
	MaxFlights int
}

// Batcher merges concurrent claims. Its zero value is not usable; see New. It starts no goroutine
// that outlives the claims in flight, so it needs no stopping.
type Batcher struct {
	cfg Config

	mu     sync.Mutex
	groups map[groupKey]*group // queues with fetches waiting or claims in flight
}

// groupKey: fetches share a claim only when every job of it is fit for each of them.
type groupKey struct {
	queue string
	lease time.Duration
}

type group struct {
	waiting []*call
	flights int
}

// call states, guarded by Batcher.mu.
const (
	waiting   = iota // in its group, not yet in a claim
	taken            // in a claim
	delivered        // its outcome is set
	abandoned        // its caller stopped waiting
)

type call struct {
	worker string
	n      int
	done   chan struct{} // closed when jobs or err is set
	jobs   []*store.Job
	err    error
	state  int
	f      *flight // set when taken
}

// flight is one claim; its context ends when every caller in it stopped waiting.
type flight struct {
	ctx    context.Context
	cancel context.CancelFunc
	live   int // callers still waiting, guarded by Batcher.mu
}

// New returns a Batcher.
func New(cfg Config) *Batcher {
	if cfg.MaxSlots <= 0 {
		cfg.MaxSlots = DefaultMaxSlots
	}
	if cfg.MaxFlights <= 0 {
		cfg.MaxFlights = DefaultMaxFlights
	}
	return &Batcher{cfg: cfg, groups: map[groupKey]*group{}}
}

// Claim claims up to n jobs of queue for worker, held for lease, sharing the claim with the
// concurrent fetches of the same queue and lease. It returns ctx's error if ctx ends first; nothing
// stays claimed for the caller then.
func (b *Batcher) Claim(ctx context.Context, queue, worker string, n int, lease time.Duration) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	if n > b.cfg.MaxSlots {
		return b.cfg.Claim(ctx, store.ClaimParams{Queue: queue, Limit: n, WorkerID: worker, LeaseDuration: lease})
	}
	k := groupKey{queue, lease}
	c := &call{worker: worker, n: n, done: make(chan struct{})}
	b.mu.Lock()
	g := b.groups[k]
	if g == nil {
		g = &group{}
		b.groups[k] = g
	}
	g.waiting = append(g.waiting, c)
	var start []*call
	if g.flights < b.cfg.MaxFlights {
		g.flights++
		start = b.take(g)
	}
	b.mu.Unlock()
	if start != nil {
		go b.fly(k, g, start)
	}
	select {
	case <-c.done:
		return c.jobs, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-c.done: // the outcome came in meanwhile: it counts
		return c.jobs, c.err
	default:
	}
	if c.state == taken {
		c.f.live--
		if c.f.live == 0 {
			c.f.cancel()
		}
	}
	c.state = abandoned
	return nil, ctx.Err()
}

// take removes from g the waiting calls that fit in one claim, oldest first, and marks them taken
// by a new flight; calls abandoned while waiting are dropped. b.mu is held. It may return an empty
// batch.
func (b *Batcher) take(g *group) []*call {
	var batch []*call
	slots := 0
	kept := g.waiting[:0]
	for _, c := range g.waiting {
		switch {
		case c.state != waiting:
		case slots+c.n <= b.cfg.MaxSlots:
			batch = append(batch, c)
			slots += c.n
		default:
			kept = append(kept, c)
		}
	}
	clear(g.waiting[len(kept):])
	g.waiting = kept
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

// fly claims for batch, then for every batch that gathered meanwhile, until the group has no
// fetch waiting.
func (b *Batcher) fly(k groupKey, g *group, batch []*call) {
	for {
		if len(batch) > 0 {
			b.claim(k, batch)
		}
		b.mu.Lock()
		if len(g.waiting) == 0 {
			g.flights--
			if g.flights == 0 {
				delete(b.groups, k)
			}
			b.mu.Unlock()
			return
		}
		batch = b.take(g)
		b.mu.Unlock()
	}
}

// claim makes one claim for batch and hands every caller its jobs: each caller's own worker id
// names them.
func (b *Batcher) claim(k groupKey, batch []*call) {
	f := batch[0].f
	defer f.cancel()
	var workers []string
	for _, c := range batch {
		for range c.n {
			workers = append(workers, c.worker)
		}
	}
	jobs, err := b.cfg.Claim(f.ctx, store.ClaimParams{Queue: k.queue, WorkerIDs: workers, LeaseDuration: k.lease})
	if err == nil && len(jobs) > len(workers) {
		err = errors.New("fetchbatch: the claim returned more jobs than it was asked for")
	}
	var byWorker map[string][]*store.Job
	if err == nil {
		byWorker = make(map[string][]*store.Job, len(batch))
		for _, j := range jobs {
			byWorker[j.WorkerID] = append(byWorker[j.WorkerID], j)
		}
	}
	var orphans []*store.Job
	b.mu.Lock()
	for _, c := range batch {
		var mine []*store.Job
		if err == nil {
			have := byWorker[c.worker]
			mine = have[:min(c.n, len(have)):min(c.n, len(have))]
			byWorker[c.worker] = have[len(mine):]
		}
		if c.state != taken {
			orphans = append(orphans, mine...)
			continue
		}
		c.state = delivered
		c.jobs, c.err = mine, err
		close(c.done)
	}
	b.mu.Unlock()
	for _, rest := range byWorker {
		orphans = append(orphans, rest...) // a store that broke the contract: give them back
	}
	if len(orphans) > 0 && b.cfg.Release != nil {
		b.cfg.Release(context.Background(), orphans)
	}
}
