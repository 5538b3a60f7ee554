// Package cancelset remembers the job runs cancelled before their holder had them: a store's
// hand-off buffer, or a client between a job's claim and its start.
package cancelset

import (
	"sync"
	"sync/atomic"
	"time"
)

// Set remembers the runs of active jobs cancelled lately, by job id and claim token, so that a run
// that reaches its holder after its cancellation was heard (the two travel apart) is stopped before
// it starts. A holder files every cancellation it hears and finds no run for with Add, and checks
// each run it files afterwards with Has: with both under one lock, or each after its own write,
// one of the two sees the other. The token makes it exact: the job retried and claimed again is
// another run. A cancellation without a token (the store did not say) is not remembered. Its
// methods are safe for concurrent use; the zero value is ready.
type Set struct {
	mu   sync.Mutex
	runs map[run]time.Time
	// swept is when Add last dropped old entries.
	swept time.Time
	// size is len(runs), read without the lock: a client asks Has of every run it starts, and
	// the set is nearly always empty.
	size atomic.Int64
}

type run struct{ id, token string }

// Kept is how long a Set remembers a cancellation: far longer than a run takes to reach
// its holder. Only active jobs are cancelled this way, and those are bounded by the workers, so the
// set stays small.
const Kept = 10 * time.Second

// Add records that the run of job id under claim token was cancelled at now.
func (c *Set) Add(id, token string, now time.Time) {
	if token == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = make(map[run]time.Time)
	}
	c.runs[run{id, token}] = now
	if now.Sub(c.swept) >= Kept {
		for k, at := range c.runs {
			if now.Sub(at) >= Kept {
				delete(c.runs, k)
			}
		}
		c.swept = now
	}
	c.size.Store(int64(len(c.runs)))
}

// Has reports whether the run of job id under claim token was cancelled less than Kept
// before now.
func (c *Set) Has(id, token string, now time.Time) bool {
	if c.size.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.runs[run{id, token}]
	return ok && now.Sub(at) < Kept
}
