package pronto

import "time"

// ClientStats is a snapshot of a client's own machinery, for metrics and health checks: what it runs
// and what it has yet to write. Job counts per state come from the store (QueueList), not from here.
type ClientStats struct {
	// Queues holds, per queue this client works, its worker slots in use and free.
	Queues map[string]QueueStats
	// Leader reports whether this client currently runs the cluster's maintenance.
	Leader bool
	// CompleterBacklog is how many attempt outcomes wait to be written to the store.
	CompleterBacklog int
	// DroppedEvents is how many events subscribers missed because their buffers were full.
	DroppedEvents int64
	// Started reports whether the client is working (Start called, Stop not yet).
	Started bool
}

// QueueStats is one queue's worker slots on one client.
type QueueStats struct {
	// Running is how many of the queue's jobs this client runs now (including ones whose outcome is
	// being decided).
	Running int
	// Prefetched is how many it has claimed ahead of a free worker (QueueConfig.Prefetch) and holds
	// waiting for one.
	Prefetched int
	// Free is how many more it could claim now: the queue's MaxWorkers plus the jobs it may
	// prefetch now, less Running and Prefetched.
	Free int
}

// Stats returns a snapshot of the client's worker slots, leadership and outcome backlog. It reads
// only in-memory state (never the store) and is cheap enough to call on every metrics scrape.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	started, stopped := c.started, c.stopped
	producers, pools, comp, m := c.producers, c.pools, c.completer, c.maintainer
	c.mu.Unlock()
	st := ClientStats{Queues: make(map[string]QueueStats, len(c.cfg.Queues)), DroppedEvents: c.events.dropped.Load(),
		Started: started && !stopped}
	for name, q := range c.cfg.Queues {
		qs := QueueStats{Free: q.MaxWorkers}
		if p := producers[name]; p != nil {
			held := p.InFlight()
			// Workers take up a prefetched job as soon as one is free, so the claimed jobs beyond
			// MaxWorkers are the ones waiting; of those, only the ones already in the pool's queue
			// are counted: a claimed job is handed to the pool a moment after the claim counts it,
			// and a count that ran ahead would say a job waits where no worker can take it yet.
			qs.Running = min(held, q.MaxWorkers)
			qs.Prefetched = min(held-qs.Running, pools[name].Len())
			qs.Free = max(p.Slots()-held, 0)
		}
		st.Queues[name] = qs
	}
	if comp != nil {
		st.CompleterBacklog = comp.Backlog()
	}
	st.Leader = m != nil && m.IsLeader()
	return st
}

// emitPrefetchedStarted emits EventStarted for a prefetched job that waited in its pool for a
// worker: its StartedAt (the claim's time, by the store's clock) moves on by that wait, so that
// pickup latency counts the wait.
func (c *Client) emitPrefetchedStarted(row *JobRow, waited time.Duration) {
	if !c.events.wants(EventStarted) {
		return
	}
	out := *row
	if !out.StartedAt.IsZero() {
		out.StartedAt = out.StartedAt.Add(waited)
	}
	c.events.emit(&Event{Kind: EventStarted, Job: &out, At: time.Now()})
}

// emitStarted emits EventStarted for each job, each with its own copy of the row.
func (c *Client) emitStarted(rows []*JobRow) {
	if len(rows) == 0 || !c.events.wants(EventStarted) {
		return
	}
	now := time.Now()
	for _, r := range rows {
		out := *r
		c.events.emit(&Event{Kind: EventStarted, Job: &out, At: now})
	}
}
