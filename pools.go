package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Worker pools (ojs-fair-scheduling.md §6, §10.1). A pool is a named group of OJS workers (processes
// fetching over HTTP) sharing a queue assignment and a concurrency bound. A fetch that names a pool
// takes jobs only from the pool's queues (all of them, in the pool's order, when it names none) and at
// most the pool's free capacity: Concurrency minus the jobs active in the pool's queues. Pools are
// stored in the store's settings (one setting, workerPoolsKey), so every server sees them.
//
// Strategies (§7): PoolStrategyRoundRobin (the default), PoolStrategyStrict, PoolStrategyWeighted
// and PoolStrategyLeastLoaded, with optional starvation prevention (§8). The strategies order the
// queues of each fetch through a pool; their state (turns, weights' credits, recent dispatches) is
// kept by each server (pronto serve) for the fetches it answers, not across the cluster.
//
// Isolation (§6.3, FS-R006): an isolated pool's queues are served only to fetches through it (or
// through another isolated pool listing the queue): an OJS fetch naming no pool or another pool
// gets no jobs from them. It governs OJS fetches (POST /ojs/v1/workers/fetch through pronto serve),
// not the application's own Go workers (Config.Queues), which the application configures. A queue of
// an isolated pool can be shared only with other isolated pools (PoolSet refuses the rest). A pool's
// active jobs are those of its queues, whoever fetched them.

// Pool strategies.
const (
	// PoolStrategyRoundRobin starts each fetch through the pool at the queue after the one the
	// previous fetch (through the same server) started at, going on to the next queues when it is
	// empty: fetches of one job each take the queues in turns (§7.1). A fetch of several jobs takes
	// them from its first queue with claimable jobs before the next.
	PoolStrategyRoundRobin = "round-robin"
	// PoolStrategyStrict consumes a pool's queues in the order listed: the first queue's claimable
	// jobs are taken before the second's.
	PoolStrategyStrict = "strict"
	// PoolStrategyWeighted serves the queues in proportion to WorkerPool.Weights (§7.3): a smooth
	// weighted round-robin, so that over each cycle of (sum of weights) one-job fetches a queue of
	// weight w is served w times, spread out, and every queue with jobs gets a turn within a cycle.
	// An empty queue is skipped and keeps its place for when it has jobs.
	PoolStrategyWeighted = "weighted"
	// PoolStrategyLeastLoaded serves first the queue with the most available jobs (§7.2), read once
	// per fetch from the store's queue counts.
	PoolStrategyLeastLoaded = "least-loaded"
)

// MaxPoolWeight bounds a queue's weight in a weighted pool.
const MaxPoolWeight = 1000

// Starvation prevention defaults (ojs-fair-scheduling.md §8.1).
const (
	DefaultRotationInterval = 30 * time.Second
	DefaultMinDispatchRatio = 0.05
)

// StarvationPrevention guards a pool's queues against starving (§8): when enabled, a queue that got
// less than MinDispatchRatio of the pool's dispatches over the last RotationInterval is served
// first by the next fetch through the pool. It applies to the strict, weighted and least-loaded
// strategies (round-robin serves every queue in turn already), counted per server.
type StarvationPrevention struct {
	// Enabled turns it on.
	Enabled bool `json:"enabled"`
	// RotationInterval is the sliding window over which dispatches are counted (0: 30 s; at least
	// 1 ms, at most 24 h).
	RotationInterval time.Duration `json:"rotation_interval,omitempty"`
	// MinDispatchRatio is the share of the pool's dispatches each queue is due, above 0 and at most
	// 1 (0: 0.05).
	MinDispatchRatio float64 `json:"min_dispatch_ratio,omitempty"`
}

// WorkerPool is a pool's configuration.
type WorkerPool struct {
	// Name identifies the pool: 1 to 128 characters of [a-z0-9._-], starting with a letter or digit.
	Name string `json:"name"`
	// Queues are the queues the pool's workers fetch from, in order (1 to 100).
	Queues []string `json:"queues"`
	// Concurrency bounds the jobs active in the pool's queues that fetches through the pool take
	// (0: no bound).
	Concurrency int `json:"concurrency,omitempty"`
	// Strategy is how the queues are consumed: PoolStrategyRoundRobin (default),
	// PoolStrategyStrict, PoolStrategyWeighted or PoolStrategyLeastLoaded.
	Strategy string `json:"strategy"`
	// Weights are the queues' weights for PoolStrategyWeighted: only the pool's queues, each 1 to
	// MaxPoolWeight; a queue without one weighs 1. Refused with another strategy.
	Weights map[string]int `json:"weights,omitempty"`
	// StarvationPrevention, when set and enabled, serves first a queue that got less than its
	// share of recent dispatches (§8).
	StarvationPrevention *StarvationPrevention `json:"starvation_prevention,omitempty"`
	// Isolated reserves the pool's queues to fetches through it (§6.3): an OJS fetch naming no
	// pool, or a pool that is not isolated, gets no jobs from them. A queue of an isolated pool can
	// be in other pools only if they are isolated too (each of them is then served).
	Isolated bool `json:"isolated,omitempty"`
}

// IsolatedQueues maps each queue of an isolated pool among pools to the isolated pools listing it,
// in pools' order: the only pools whose fetches a server dispatches that queue's jobs to.
func IsolatedQueues(pools []*WorkerPool) map[string][]string {
	var m map[string][]string
	for _, p := range pools {
		if !p.Isolated {
			continue
		}
		if m == nil {
			m = map[string][]string{}
		}
		for _, q := range p.Queues {
			m[q] = append(m[q], p.Name)
		}
	}
	return m
}

// isolationConflict refuses p beside the other pools in m when a queue would be in an isolated pool
// and in one that is not: the second would never get that queue's jobs, which is surely not meant.
func isolationConflict(p *WorkerPool, m map[string]*WorkerPool) error {
	names := slices.Sorted(maps.Keys(m))
	for _, name := range names {
		o := m[name]
		if name == p.Name || o.Isolated == p.Isolated {
			continue
		}
		for _, q := range p.Queues {
			if !slices.Contains(o.Queues, q) {
				continue
			}
			iso, other := p, o
			if o.Isolated {
				iso, other = o, p
			}
			return invalidf("pool %q: queue %q is in isolated pool %q and in pool %q, which is not isolated: "+
				"a queue of an isolated pool can be shared only with other isolated pools", p.Name, q, iso.Name, other.Name)
		}
	}
	return nil
}

// Weight returns queue's weight in the pool: its Weights entry, else 1.
func (p *WorkerPool) Weight(queue string) int {
	if w, ok := p.Weights[queue]; ok {
		return w
	}
	return 1
}

// workerPoolsKey is the setting (store.SettingStore) holding every pool, a JSON object keyed by name.
const workerPoolsKey = "worker_pools"

// ValidPoolName reports whether name can name a worker pool.
func ValidPoolName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == '.' || r == '_' || r == '-'):
		default:
			return false
		}
	}
	return true
}

func (p *WorkerPool) validate() error {
	if !ValidPoolName(p.Name) {
		return invalidf("pool name %q: must be 1 to 128 characters of [a-z0-9._-], starting with a letter or digit", p.Name)
	}
	if len(p.Queues) == 0 || len(p.Queues) > 100 {
		return invalidf("pool %q: must name 1 to 100 queues", p.Name)
	}
	for i, q := range p.Queues {
		if !ValidQueueName(q) {
			return invalidf("pool %q: queue name %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", p.Name, q)
		}
		if slices.Contains(p.Queues[:i], q) {
			return invalidf("pool %q: queue %q is listed twice", p.Name, q)
		}
	}
	if p.Concurrency < 0 {
		return invalidf("pool %q: concurrency %d: must be 0 (no bound) or more", p.Name, p.Concurrency)
	}
	if p.Strategy == "" {
		p.Strategy = PoolStrategyRoundRobin
	}
	switch p.Strategy {
	case PoolStrategyRoundRobin, PoolStrategyStrict, PoolStrategyWeighted, PoolStrategyLeastLoaded:
	default:
		return invalidf("pool %q: strategy %q: must be %q, %q, %q or %q", p.Name, p.Strategy,
			PoolStrategyRoundRobin, PoolStrategyStrict, PoolStrategyWeighted, PoolStrategyLeastLoaded)
	}
	if len(p.Weights) > 0 && p.Strategy != PoolStrategyWeighted {
		return invalidf("pool %q: weights are for the %q strategy, not %q", p.Name, PoolStrategyWeighted, p.Strategy)
	}
	for q, w := range p.Weights {
		if !slices.Contains(p.Queues, q) {
			return invalidf("pool %q: weight for queue %q, which is not one of the pool's queues", p.Name, q)
		}
		if w < 1 || w > MaxPoolWeight {
			return invalidf("pool %q: weight %d for queue %q: must be 1 to %d", p.Name, w, q, MaxPoolWeight)
		}
	}
	if sp := p.StarvationPrevention; sp != nil {
		if sp.RotationInterval == 0 {
			sp.RotationInterval = DefaultRotationInterval
		}
		if sp.RotationInterval < time.Millisecond || sp.RotationInterval > 24*time.Hour {
			return invalidf("pool %q: starvation_prevention.rotation_interval %s: must be 1 ms to 24 h", p.Name, sp.RotationInterval)
		}
		if sp.MinDispatchRatio == 0 {
			sp.MinDispatchRatio = DefaultMinDispatchRatio
		}
		if !(sp.MinDispatchRatio > 0 && sp.MinDispatchRatio <= 1) {
			return invalidf("pool %q: starvation_prevention.min_dispatch_ratio %v: must be above 0 and at most 1", p.Name, sp.MinDispatchRatio)
		}
	}
	return nil
}

func (c *Client) readPools(ctx context.Context) (store.SettingStore, map[string]*WorkerPool, error) {
	ss, err := c.poolSettings()
	if err != nil {
		return nil, nil, err
	}
	raw, err := ss.GetSetting(ctx, workerPoolsKey)
	if err != nil {
		return nil, nil, wrapOp("worker pools", err)
	}
	m, err := decodePools(raw)
	if err != nil {
		return nil, nil, err
	}
	return ss, m, nil
}

func (c *Client) poolSettings() (store.SettingStore, error) {
	ss, ok := c.settings()
	if !ok {
		return nil, fmt.Errorf("pronto: %T keeps no settings (store.SettingStore): %w", c.store, ErrUnsupported)
	}
	return ss, nil
}

// decodePools reads the worker_pools setting (nil: no pools).
func decodePools(raw json.RawMessage) (map[string]*WorkerPool, error) {
	m := map[string]*WorkerPool{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("pronto: setting %s: %w", workerPoolsKey, err)
		}
	}
	for name, p := range m {
		p.Name = name
	}
	return m, nil
}

// updatePools changes the pools by fn, against the pools as stored when the change is written
// (updateSetting): fn may run more than once.
func (c *Client) updatePools(ctx context.Context, fn func(m map[string]*WorkerPool) error) error {
	ss, err := c.poolSettings()
	if err != nil {
		return err
	}
	c.tg.setMu.Lock() // this process's changes queue up rather than retry against each other
	defer c.tg.setMu.Unlock()
	err = updateSettingMap(ctx, ss, workerPoolsKey, func(m map[string]*WorkerPool) error {
		for name, p := range m {
			if p == nil {
				delete(m, name) // a null entry (written by hand) is no pool
				continue
			}
			p.Name = name
		}
		return fn(m)
	})
	if err != nil && !errors.Is(err, ErrInvalidArgs) && !errors.Is(err, ErrNotFound) {
		return wrapOp("worker pools", err)
	}
	return err
}

// PoolSet creates or replaces a worker pool. Every server applies it from the next fetch on. The
// change applies to the pools as stored at that moment, so pools changed by several processes at
// once are all kept, and the isolation check runs against them.
func (c *Client) PoolSet(ctx context.Context, p WorkerPool) error {
	p.Queues = slices.Clone(p.Queues)
	p.Weights = maps.Clone(p.Weights)
	if p.StarvationPrevention != nil {
		sp := *p.StarvationPrevention
		p.StarvationPrevention = &sp
	}
	if err := p.validate(); err != nil {
		return err
	}
	return c.updatePools(ctx, func(m map[string]*WorkerPool) error {
		if err := isolationConflict(&p, m); err != nil {
			return err
		}
		m[p.Name] = &p
		return nil
	})
}

// PoolDelete removes a worker pool, or returns ErrNotFound.
func (c *Client) PoolDelete(ctx context.Context, name string) error {
	return c.updatePools(ctx, func(m map[string]*WorkerPool) error {
		if _, ok := m[name]; !ok {
			return fmt.Errorf("pronto: worker pool %q: %w", name, ErrNotFound)
		}
		delete(m, name)
		return nil
	})
}

// PoolGet returns one worker pool, or ErrNotFound.
func (c *Client) PoolGet(ctx context.Context, name string) (*WorkerPool, error) {
	_, m, err := c.readPools(ctx)
	if err != nil {
		return nil, err
	}
	p, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("pronto: worker pool %q: %w", name, ErrNotFound)
	}
	return p, nil
}

// PoolList returns every worker pool, by name.
func (c *Client) PoolList(ctx context.Context) ([]*WorkerPool, error) {
	_, m, err := c.readPools(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*WorkerPool, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *WorkerPool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
