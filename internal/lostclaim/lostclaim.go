// Package lostclaim runs a store's recovery of claims whose reply was lost: claims that may have
// committed though their caller heard an error (a broken connection, a context that ended after
// the claim was sent). Their jobs are active under a claim nobody holds; the store finds them (by
// a tag or the tokens the claim wrote) and returns them unstarted, so that the rescue does not
// spend attempts that never ran. The store says how to settle one claim; this package keeps
// trying, in one background goroutine that runs while claims are pending.
package lostclaim

import (
	"context"
	"sync"
	"time"
)

// The recovery's pace: a claim is first looked at at once, then again after First, the pause
// doubling up to Max. A pass over the pending claims, and Close's last one, get PassTimeout in all.
const (
	First       = 25 * time.Millisecond
	Max         = time.Second
	PassTimeout = 5 * time.Second
)

// Recovery settles lost claims of type C.
type Recovery[C any] struct {
	// settle looks for c's jobs and returns those it finds, within ctx; it reports whether c is
	// done with (its jobs returned and none can turn up later, or past its lease, when the rescue
	// has them).
	settle func(ctx context.Context, c C) bool

	mu             sync.Mutex
	pending        []C
	running, ended bool
	closed         chan struct{}
	wg             sync.WaitGroup
}

// New returns a Recovery that settles each claim with settle (see Recovery.settle).
func New[C any](settle func(ctx context.Context, c C) bool) *Recovery[C] {
	return &Recovery[C]{settle: settle, closed: make(chan struct{})}
}

// Add starts recovering c.
func (r *Recovery[C]) Add(c C) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, c)
	if r.running || r.ended {
		return // the loop, or Close's last pass, takes it
	}
	r.running = true
	r.wg.Add(1)
	go r.loop()
}

// Idle reports whether no claim is pending.
func (r *Recovery[C]) Idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.running && len(r.pending) == 0
}

func (r *Recovery[C]) loop() {
	defer r.wg.Done()
	pause := First
	for {
		r.mu.Lock()
		claims := r.pending
		r.pending = nil
		r.mu.Unlock()
		left := r.pass(claims)
		r.mu.Lock()
		r.pending = append(r.pending, left...)
		if len(r.pending) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		t := time.NewTimer(pause)
		select {
		case <-r.closed:
			t.Stop()
			return // Close makes the last pass
		case <-t.C:
		}
		pause = min(2*pause, Max)
	}
}

// Close stops the loop and makes one last pass over the claims still pending: jobs of theirs that
// turn up later come back when their leases end. Claims added later are not looked at.
func (r *Recovery[C]) Close() {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return
	}
	r.ended = true
	close(r.closed)
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	claims := r.pending
	r.pending = nil
	r.mu.Unlock()
	r.pass(claims)
}

// pass settles what it can of claims within PassTimeout and returns the others.
func (r *Recovery[C]) pass(claims []C) (left []C) {
	ctx, cancel := context.WithTimeout(context.Background(), PassTimeout)
	defer cancel()
	for _, c := range claims {
		if ctx.Err() != nil || !r.settle(ctx, c) {
			left = append(left, c)
		}
	}
	return left
}
