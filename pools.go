package pronto

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pronto-jobs/pronto/store"
)

// Worker pools (ojs-fair-scheduling.md §6, §10.1). A pool is a named group of OJS workers (processes
// fetching over HTTP) sharing a queue assignment and a concurrency bound. A fetch that names a pool
// takes jobs only from the pool's queues (all of them, in the pool's order, when it names none) and at
// most the pool's free capacity: Concurrency minus the jobs active in the pool's queues. Pools are
// stored in the store's settings (one setting, workerPoolsKey), so every server sees them.
//
// Strategies (§7): PoolStrategyRoundRobin (the default) and PoolStrategyStrict. What a pool does not
// do (see docs/fair-scheduling.md): the weighted and least-loaded strategies are not implemented; a
// pool's queues stay open to workers outside it (no pool isolation); and its active jobs are those of
// its queues, whoever fetched them.

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
)

// WorkerPool is a pool's configuration.
type WorkerPool struct {
	// Name identifies the pool: 1 to 128 characters of [a-z0-9._-], starting with a letter or digit.
	Name string `json:"name"`
	// Queues are the queues the pool's workers fetch from, in order (1 to 100).
	Queues []string `json:"queues"`
	// Concurrency bounds the jobs active in the pool's queues that fetches through the pool take
	// (0: no bound).
	Concurrency int `json:"concurrency,omitempty"`
	// Strategy is how the queues are consumed: PoolStrategyRoundRobin (default) or
	// PoolStrategyStrict.
	Strategy string `json:"strategy"`
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
	if p.Strategy != PoolStrategyStrict && p.Strategy != PoolStrategyRoundRobin {
		return fmt.Errorf("pool %q: strategy %q: only %q and %q are implemented: %w", p.Name, p.Strategy, PoolStrategyRoundRobin, PoolStrategyStrict, ErrUnsupported)
	}
	return nil
}

func (c *Client) readPools(ctx context.Context) (store.SettingStore, map[string]*WorkerPool, error) {
	ss, ok := c.settings()
	if !ok {
		return nil, nil, fmt.Errorf("pronto: %T keeps no settings (store.SettingStore): %w", c.store, ErrUnsupported)
	}
	raw, err := ss.GetSetting(ctx, workerPoolsKey)
	if err != nil {
		return nil, nil, wrapOp("worker pools", err)
	}
	m := map[string]*WorkerPool{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, nil, fmt.Errorf("pronto: setting %s: %w", workerPoolsKey, err)
		}
	}
	for name, p := range m {
		p.Name = name
	}
	return ss, m, nil
}

// PoolSet creates or replaces a worker pool. Every server applies it from the next fetch on. Two
// processes changing pools at the same instant may lose one of the changes (the pools are one
// setting, written whole).
func (c *Client) PoolSet(ctx context.Context, p WorkerPool) error {
	p.Queues = slices.Clone(p.Queues)
	if err := p.validate(); err != nil {
		return err
	}
	c.tg.setMu.Lock()
	defer c.tg.setMu.Unlock()
	ss, m, err := c.readPools(ctx)
	if err != nil {
		return err
	}
	m[p.Name] = &p
	return writePools(ctx, ss, m)
}

func writePools(ctx context.Context, ss store.SettingStore, m map[string]*WorkerPool) error {
	var raw json.RawMessage
	if len(m) > 0 {
		var err error
		if raw, err = json.Marshal(m); err != nil {
			return err
		}
	}
	if err := ss.SetSetting(ctx, workerPoolsKey, raw); err != nil {
		return wrapOp("worker pools", err)
	}
	return nil
}

// PoolDelete removes a worker pool, or returns ErrNotFound.
func (c *Client) PoolDelete(ctx context.Context, name string) error {
	c.tg.setMu.Lock()
	defer c.tg.setMu.Unlock()
	ss, m, err := c.readPools(ctx)
	if err != nil {
		return err
	}
	if _, ok := m[name]; !ok {
		return fmt.Errorf("pronto: worker pool %q: %w", name, ErrNotFound)
	}
	delete(m, name)
	return writePools(ctx, ss, m)
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
