package redis

import (
	"sync"

	"github.com/pronto-jobs/pronto/store"
)

// defaultClaimCacheSize is the number of jobs a generation of the claim cache holds.
const defaultClaimCacheSize = 1 << 15

// claimCache remembers the queue of the jobs this store claimed, so that their outcomes and
// heartbeats skip the id index. An entry is a hint, never the truth: the job may have been finished
// through another process, rescued, deleted, and its id reused in another queue. Finish and
// Heartbeat check a hint by the outcome of the script it sent them to, and look the queue up in the
// index when the job was not found there (see Store.recheck).
//
// Jobs finished elsewhere are never forgotten one by one, so the cache keeps two generations: when
// the current one is full it becomes the old one and the one before goes, which bounds the cache to
// twice size entries. A job held longer than two generations of claims costs an index lookup.
type claimCache struct {
	mu       sync.Mutex
	size     int
	cur, old map[string]string
}

// add records the queues of claimed jobs.
func (c *claimCache) add(jobs []*store.Job) {
	if len(jobs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size <= 0 {
		c.size = defaultClaimCacheSize
	}
	for _, j := range jobs {
		if c.cur == nil || len(c.cur) >= c.size {
			c.old, c.cur = c.cur, make(map[string]string, min(c.size, 1024))
		}
		c.cur[j.ID] = j.Queue
	}
}

// lookup fills out[i] with the remembered queue of ids[i] and returns the indexes it has none for.
func (c *claimCache) lookup(ids, out []string) (miss []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		if q, ok := c.cur[id]; ok {
			out[i] = q
		} else if q, ok := c.old[id]; ok {
			out[i] = q
		} else {
			miss = append(miss, i)
		}
	}
	return miss
}

// forget drops the entries of ids.
func (c *claimCache) forget(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.cur, id)
		delete(c.old, id)
	}
}

// len returns the number of entries.
func (c *claimCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
