package pronto

import (
	"context"
	"sync"
	"time"
)

// progressChecks learns, after remote acks, which acked runs reported progress, and emits
// EventProgressCompleted for them. A remote worker may have reported through another server, so
// only the store knows; asking it in the ack itself cost every ack a round trip and a pool
// connection. The checks are made after the ack has answered instead, batched: one goroutine, started
// when checks are waiting and gone when none are, reads the progress of every waiting job at once
// (store.ProgressStore.GetProgressBatch). The events follow their job.completed by the
// time of a read.
type progressChecks struct {
	mu      sync.Mutex
	waiting []progressCheck
	running bool
}

// progressCheck is one acked run to check.
type progressCheck struct {
	job *JobRow // as completed
	dur time.Duration
	at  time.Time
}

// maxProgressCheckBatch bounds one read; maxProgressChecksWaiting bounds the checks waiting (past
// it an ack checks on its own, as before: the checks never hold more than this much memory).
const (
	maxProgressCheckBatch    = 500
	maxProgressChecksWaiting = 100_000
	progressCheckTimeout     = 10 * time.Second
)

// checkProgressCompleted arranges for EventProgressCompleted to be emitted for out, a job just
// completed by a remote ack, if its run reported progress.
func (c *Client) checkProgressCompleted(out *JobRow, dur time.Duration, at time.Time) {
	p := &c.progressChecks
	p.mu.Lock()
	if len(p.waiting) >= maxProgressChecksWaiting {
		p.mu.Unlock()
		c.emitCheckedProgress([]progressCheck{{out, dur, at}})
		return
	}
	p.waiting = append(p.waiting, progressCheck{out, dur, at})
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		go c.runProgressChecks()
	}
}

func (c *Client) runProgressChecks() {
	p := &c.progressChecks
	for {
		p.mu.Lock()
		n := min(len(p.waiting), maxProgressCheckBatch)
		if n == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		batch := p.waiting[:n:n]
		p.waiting = p.waiting[n:]
		if len(p.waiting) == 0 {
			p.waiting = nil // let the backing array go
		}
		p.mu.Unlock()
		c.emitCheckedProgress(batch)
	}
}

// emitCheckedProgress reads the progress of batch's jobs and emits EventProgressCompleted for each
// whose completing run reported progress (a value or data).
func (c *Client) emitCheckedProgress(batch []progressCheck) {
	ctx, cancel := context.WithTimeout(context.Background(), progressCheckTimeout)
	defer cancel()
	ids := make([]string, len(batch))
	for i, b := range batch {
		ids[i] = b.job.ID
	}
	progress, err := c.store.GetProgressBatch(ctx, ids)
	if err != nil {
		c.cfg.Logger.Warn("pronto: reading the progress of acked jobs failed", "jobs", len(ids), "err", err)
		return
	}
	for _, b := range batch {
		// The run that completed is the one that reported: a report of an earlier run does not count.
		if pr := progress[b.job.ID]; pr != nil && (pr.Value != nil || pr.Data != nil) && pr.RunStartedAt.Equal(b.job.StartedAt) {
			c.emitProgressCompleted(b.job, pr.Data, b.dur, b.at)
		}
	}
}
