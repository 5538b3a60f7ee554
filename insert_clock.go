package pronto

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// An InsertOpts.Delay (and an OJS relative time, "+PT5S") counts from the store's clock, as due
// jobs are judged by it: counted from this process's clock, a process an hour fast would schedule a
// "+1 min" job an hour late, and one an hour slow would have it run at once. Reading the store's
// clock at every such insert would cost a round trip each, so the client keeps the offset between
// the two clocks and reads it again at most once a minute, only for an insert that has a Delay:
// inserts without one never read it. The first delayed insert of a minute reads it before
// resolving (one StoreNow round trip; concurrent ones wait for that one reading), which keeps the
// due time right from the first insert on, unlike a background refresh that would leave the first
// ones uncorrected. Clocks drift by milliseconds a minute, far within the tolerance.
const (
	// storeOffsetTTL is how long one reading of the offset is used.
	storeOffsetTTL = time.Minute
	// storeOffsetTolerance is how far the clocks may differ before a Delay is moved to the store's
	// clock: within it (clocks kept by NTP, plus the reading's latency) the process's clock is
	// used, as a retry's or snooze's due time is on PostgreSQL and Redis (see Finish).
	storeOffsetTolerance = time.Second
)

// storeOffset is a client's cached offset of the store's clock from its process's.
type storeOffset struct {
	cur atomic.Pointer[offsetReading] // nil before the first reading

	mu sync.Mutex
	// reading is closed when the reading in flight ends; nil when none is.
	reading chan struct{}
}

// offsetReading is one reading of the offset.
type offsetReading struct {
	off time.Duration // the store's clock minus this process's; zero within storeOffsetTolerance
	at  time.Time     // when it was read (time.Now, monotonic: a skew set by a test does not age it)
}

func (r *offsetReading) fresh() bool { return r != nil && time.Since(r.at) < storeOffsetTTL }

// sharedClock returns the store's clock when the store has one that other processes share
// (PostgreSQL, Redis); SQLite and the memory store are one machine, one clock.
func (c *Client) sharedClock() (storeClock, bool) {
	sc, ok := c.store.(storeClock)
	if !ok {
		return nil, false
	}
	if li, ok := c.store.(store.LocalInserter); ok && li.InsertsAreLocal() {
		return nil, false
	}
	return sc, true
}

// delayNow is the time from which a Delay counts: this process's clock moved to the store's by the
// cached offset, read first when it is older than storeOffsetTTL. When the store's clock cannot be
// read (the store down, ctx done) the last offset read is used, or none: the insert that follows
// reports the store's state better than the clock reading would.
func (c *Client) delayNow(ctx context.Context) time.Time {
	return c.wallNow().Add(c.storeClockOffset(ctx))
}

// storeClockOffset returns the store's clock minus this process's, zero within
// storeOffsetTolerance or when the store has no shared clock (see delayNow).
func (c *Client) storeClockOffset(ctx context.Context) time.Duration {
	r := c.offset.cur.Load()
	if r.fresh() {
		return r.off
	}
	sc, ok := c.sharedClock()
	if !ok {
		return 0
	}
	c.offset.mu.Lock()
	if r = c.offset.cur.Load(); r.fresh() {
		c.offset.mu.Unlock()
		return r.off
	}
	done, lead := c.offset.reading, false
	if done == nil {
		done, lead = make(chan struct{}), true
		c.offset.reading = done
	}
	c.offset.mu.Unlock()
	if lead {
		c.readStoreOffset(ctx, sc)
		c.offset.mu.Lock()
		c.offset.reading = nil
		c.offset.mu.Unlock()
		close(done)
	} else {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	if r = c.offset.cur.Load(); r != nil {
		return r.off // perhaps stale when this reading failed: still the best known
	}
	return 0
}

// readStoreOffset reads the store's clock once and caches its offset from this process's, taken at
// the middle of the round trip (to within half of it).
func (c *Client) readStoreOffset(ctx context.Context, sc storeClock) {
	before := c.wallNow()
	now, err := sc.StoreNow(ctx)
	if err != nil {
		c.cfg.Logger.Debug("pronto: reading the store's clock for a delayed insert failed; using the last offset known", "error", err)
		return
	}
	after := c.wallNow()
	off := now.Sub(before.Add(after.Sub(before) / 2))
	if off >= -storeOffsetTolerance && off <= storeOffsetTolerance {
		off = 0
	}
	c.offset.cur.Store(&offsetReading{off: off, at: time.Now()})
}
