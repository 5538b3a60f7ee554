// Package costcap bounds what a repeated expensive read costs the store: a read that took long is
// answered again from its result for a while, in proportion to what it cost, and concurrent
// callers share one read.
//
// It is for counts that dashboards, metrics and APIs ask for every second or so, such as the job
// counts of every queue: on a small table the count is cheap and every call reads afresh, so a
// caller always sees its own writes; on a table of millions of jobs the count is a scan of
// seconds, which, asked every second, would keep a database connection busy for as long as anyone
// watches. Once a read is costly (by default: it took DefaultThreshold or more), its result
// serves the calls of the next Factor times its duration (at most Max), so reading costs the store
// at most about 1/Factor of one connection's time, and the result is at most that old.
package costcap

import (
	"context"
	"sync"
	"time"
)

// Defaults of Reader's zero fields.
const (
	// DefaultThreshold is the duration from which a read is costly when Reader.Costly is nil.
	DefaultThreshold = 50 * time.Millisecond
	DefaultFactor    = 20
	DefaultMax       = time.Minute
)

// Reader answers Get with Read's result, reusing a costly one (see the package doc). The zero
// value is not usable: set Read. Its methods are safe for concurrent use.
type Reader[T any] struct {
	// Read reads the value.
	Read func(context.Context) (T, error)
	// Clone copies a value a caller gets, so that no caller's changes reach another's; nil
	// hands out the value itself.
	Clone func(T) T
	// Costly says whether a read that returned v and took took is costly, so that its result is
	// reused; nil: whether it took DefaultThreshold or more. A caller whose own writes must show
	// in the next read (tests on small stores) wants a test that a loaded machine cannot pass by
	// slowness alone, such as the size of the result.
	Costly func(v T, took time.Duration) bool
	// Factor is how many times its duration a costly result is reused for (DefaultFactor).
	Factor int
	// Max bounds how long a result is reused (DefaultMax).
	Max time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu      sync.Mutex
	val     T
	until   time.Time // the result is reused before this time; zero: not at all
	costly  bool      // the latest read took Threshold or more
	reading *read[T]  // the read in flight, shared while costly
}

// read is one call of Read that others may wait for.
type read[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// Get returns the latest result while it is reused, else a new read's. While reads are costly, a
// call that comes while one is in flight waits for it (or for ctx) and shares its result; while
// they are cheap, every call reads for itself, so it sees what was written before it.
func (r *Reader[T]) Get(ctx context.Context) (T, error) {
	now := r.now()
	r.mu.Lock()
	if !r.until.IsZero() && now.Before(r.until) {
		v := r.val
		r.mu.Unlock()
		return r.clone(v), nil
	}
	if rd := r.reading; rd != nil && r.costly {
		r.mu.Unlock()
		select {
		case <-rd.done:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
		if rd.err != nil {
			var zero T
			return zero, rd.err
		}
		return r.clone(rd.val), nil
	}
	rd := &read[T]{done: make(chan struct{})}
	r.reading = rd
	r.mu.Unlock()

	start := r.now()
	v, err := r.Read(ctx)
	took := r.now().Sub(start)

	r.mu.Lock()
	if r.reading == rd {
		r.reading = nil
	}
	if err == nil {
		r.costly = r.isCostly(v, took)
		r.val = v
		r.until = time.Time{}
		if r.costly {
			r.until = r.now().Add(min(time.Duration(r.factor())*took, r.max()))
		}
	}
	r.mu.Unlock()
	rd.val, rd.err = v, err
	close(rd.done)
	if err != nil {
		return v, err
	}
	return r.clone(v), nil
}

func (r *Reader[T]) clone(v T) T {
	if r.Clone == nil {
		return v
	}
	return r.Clone(v)
}

func (r *Reader[T]) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reader[T]) isCostly(v T, took time.Duration) bool {
	if r.Costly != nil {
		return r.Costly(v, took)
	}
	return took >= DefaultThreshold
}

func (r *Reader[T]) factor() int {
	if r.Factor > 0 {
		return r.Factor
	}
	return DefaultFactor
}

func (r *Reader[T]) max() time.Duration {
	if r.Max > 0 {
		return r.Max
	}
	return DefaultMax
}
