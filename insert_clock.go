package pronto

import (
	"context"
	"time"

	"github.com/pronto-jobs/pronto/internal/clockoffset"
	"github.com/pronto-jobs/pronto/store"
)

// An InsertOpts.Delay (and an OJS relative time, "+PT5S") counts from the store's clock, as due
// jobs are judged by it: counted from this process's clock, a process an hour fast would schedule a
// "+1 min" job an hour late, and one an hour slow would have it run at once. Reading the store's
// clock at every such insert would cost a round trip each, so the client keeps the offset between
// the two clocks (internal/clockoffset, as the PostgreSQL store's finish does) and reads it again
// at most once a minute, only for an insert that has a Delay (or a StoreTime call): other inserts
// never read it. The first delayed insert of a minute reads it before resolving (one StoreNow
// round trip; concurrent ones wait for that one reading), which keeps the due time right from the
// first insert on, unlike a background refresh that would leave the first ones uncorrected. Clocks
// drift by milliseconds a minute, far within the 1 s tolerance (clockoffset.Tolerance) within
// which the process's clock is used as is, as for a retry's due time (see Finish).

// storeOffset is a client's cached offset of the store's clock from its process's.
type storeOffset struct{ clockoffset.Cache }

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
// cached offset, read first when it is older than a minute (or this process's clock jumped). When
// the store's clock cannot be read (the store down, ctx done) the last offset read is used, or
// none: the insert that follows reports the store's state better than the clock reading would.
func (c *Client) delayNow(ctx context.Context) time.Time {
	return c.wallNow().Add(c.storeClockOffset(ctx))
}

// StoreTime returns the store's current time as this client knows it: the process's clock moved
// by the client's cached offset of the store's clock, the one InsertOpts.Delay counts from (right
// to within about a second; read at most once a minute, so the first call of a minute may wait
// one round trip to the store). A time computed by the caller that the store will judge, such as
// an expiry given relative to now, should count from it rather than from time.Now, which may be
// off on this machine. With SQLite or the memory store it is the process's clock.
func (c *Client) StoreTime(ctx context.Context) time.Time { return c.delayNow(ctx) }

// storeClockOffset returns the store's clock minus this process's, zero within
// clockoffset.Tolerance or when the store has no shared clock (see delayNow).
func (c *Client) storeClockOffset(ctx context.Context) time.Duration {
	sc, ok := c.sharedClock()
	if !ok {
		return 0
	}
	off, err := c.offset.Offset(ctx, c.wallNow, sc.StoreNow)
	if err != nil {
		c.cfg.Logger.Debug("pronto: reading the store's clock for a delayed insert failed; using the last offset known", "error", err)
	}
	return off
}
