// Package clockoffset keeps the offset of a shared store's clock (PostgreSQL's, Redis's) from this
// process's, measured by a round trip and cached, so that a time this process computes (a retry's
// due time, an insert's Delay) can be moved to the clock that judges it without a round trip each
// time.
//
// A reading is the offset at the middle of a round trip: the store's time minus the process's
// halfway between sending and receiving, right to within half the round trip whatever the load
// (a slow statement widens the round trip, it does not shift the midpoint's error beyond half of
// it). Of a few round trips the shortest is kept. A reading is used for TTL, and sooner read again
// when the process's clock jumped against its monotonic clock (an NTP step, a resumed VM), which
// changes the offset at once.
package clockoffset

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// TTL is how long one reading is used. Clocks kept by NTP drift by milliseconds a minute, far
	// within Tolerance.
	TTL = time.Minute
	// Tolerance is the offset below which the clocks count as one: within it (NTP, plus half a round
	// trip) times are written as the process computed them, exactly, as the stores' shared tests
	// require; Offset then reports zero.
	Tolerance = time.Second
)

// ReadFunc reads the store's clock once.
type ReadFunc func(ctx context.Context) (time.Time, error)

// Measure reads the store's clock samples times (at least once) and returns its offset from the
// process's clock now (the store's minus the process's) by the round trip that took least time,
// and that round trip: the offset is right to within half of it. now must carry a monotonic
// reading (time.Now, or time.Now moved by Add), so that a round trip is timed by the monotonic
// clock. It stops at the first error.
func Measure(ctx context.Context, now func() time.Time, read ReadFunc, samples int) (off, rtt time.Duration, err error) {
	best := time.Duration(-1)
	for range max(samples, 1) {
		before := now()
		at, err := read(ctx)
		if err != nil {
			return 0, 0, err
		}
		d := now().Sub(before)
		if best < 0 || d < best {
			best, off = d, at.Sub(before.Add(d/2))
		}
	}
	return off, best, nil
}

// Cache is one store's cached offset. Its zero value is ready to use and reads once a round trip;
// Samples sets more. A Cache must not be copied after first use.
type Cache struct {
	// Samples is how many round trips a reading takes (the shortest is kept); 0 means 1.
	Samples int

	cur atomic.Pointer[reading] // nil before the first reading

	mu sync.Mutex
	// inflight is closed when the reading in progress ends; nil when none is.
	inflight chan struct{}
}

// reading is one measurement of the offset.
type reading struct {
	off  time.Duration // the store's clock minus the process's; zero within Tolerance
	mono time.Time     // time.Now at the reading, for its age
	wall time.Time     // the process's clock at the reading, wall time only (Round(0))
}

// fresh reports whether r is younger than TTL and the process's clock, now, has not jumped since.
func (r *reading) fresh(now time.Time) bool {
	if r == nil {
		return false
	}
	age := time.Since(r.mono)
	if age >= TTL {
		return false
	}
	jump := now.Round(0).Sub(r.wall) - age
	return jump > -Tolerance && jump < Tolerance
}

// Offset returns the store's clock minus the process's (now), zero within Tolerance. It reads the
// store's clock (read) first when the cached reading is missing or stale; concurrent callers wait
// for that one reading (or for their ctx). When the reading fails, Offset returns the last offset
// known (zero when none) and the reading's error, for the caller to log: the statement that
// follows reports the store's state better than the clock reading would.
func (c *Cache) Offset(ctx context.Context, now func() time.Time, read ReadFunc) (time.Duration, error) {
	if r := c.cur.Load(); r.fresh(now()) {
		return r.off, nil
	}
	c.mu.Lock()
	if r := c.cur.Load(); r.fresh(now()) {
		c.mu.Unlock()
		return r.off, nil
	}
	done, lead := c.inflight, false
	if done == nil {
		done, lead = make(chan struct{}), true
		c.inflight = done
	}
	c.mu.Unlock()
	var err error
	if lead {
		err = c.read(ctx, now, read)
		c.mu.Lock()
		c.inflight = nil
		c.mu.Unlock()
		close(done)
	} else {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	if r := c.cur.Load(); r != nil {
		return r.off, err // perhaps stale when this reading failed: still the best known
	}
	return 0, err
}

// read measures the offset and caches it. An offset counts only when the clocks are certainly
// further apart than Tolerance: beyond it by more than the reading's own error, half its round
// trip. On a loaded machine every round trip may be long (a pool's wait, a descheduled process),
// and one whose latency fell before the store's reading would otherwise move every due time of
// the next minute by half of it, clocks that agree included.
func (c *Cache) read(ctx context.Context, now func() time.Time, read ReadFunc) error {
	off, rtt, err := Measure(ctx, now, read, c.Samples)
	if err != nil {
		return err
	}
	if bound := Tolerance + rtt/2; off >= -bound && off <= bound {
		off = 0
	}
	c.cur.Store(&reading{off: off, mono: time.Now(), wall: now().Round(0)})
	return nil
}
