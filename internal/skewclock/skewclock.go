// Package skewclock is the process clock that a test can put off the true time for one object (a
// client, a store, a server), so that it plays a process on a machine whose clock is wrong without a
// fake clock in production.
package skewclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the process clock of objects of type K. Its zero value reads time.Now for every object.
type Clock[K comparable] struct {
	skewed atomic.Int64 // how many objects are off: zero outside tests, so Now costs one load
	skew   sync.Map     // K -> time.Duration
}

// Now is the time on k's clock: time.Now, offset by the skew a test set for k.
func (c *Clock[K]) Now(k K) time.Time {
	if c.skewed.Load() == 0 {
		return time.Now()
	}
	if d, ok := c.skew.Load(k); ok {
		return time.Now().Add(d.(time.Duration))
	}
	return time.Now()
}

// Cleaner is what Skew needs of a test (testing.TB), without this package importing testing.
type Cleaner interface{ Cleanup(func()) }

// Skew makes k's clock read skew off the true time until the test t ends.
func (c *Clock[K]) Skew(t Cleaner, k K, skew time.Duration) {
	if _, loaded := c.skew.Swap(k, skew); !loaded {
		c.skewed.Add(1)
	}
	t.Cleanup(func() {
		if _, loaded := c.skew.LoadAndDelete(k); loaded {
			c.skewed.Add(-1)
		}
	})
}
