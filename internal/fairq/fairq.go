// Package fairq is the queue between a client's claims and its workers: claimed jobs wait in it for
// a free worker, and the workers take them in turns across tenants.
//
// The store already hands out a queue's jobs in turns across tenants (fair scheduling), but a
// client that claims ahead of its workers (prefetch) holds jobs from earlier claims: taken in claim
// order, a tenant's job from the latest claim would wait behind every job held for the others. So
// each key (a tenant, or "" for jobs without one) has its own first-in first-out line, and Pop
// serves the keys with waiting items one item each in a fixed rotation; a key that comes (or comes
// back) joins the rotation after the keys waiting since the latest turn, before the key that had
// it. With one key it is a plain first-in first-out queue.
package fairq

import "sync"

// Queue is an unbounded queue of T in turns across keys. Its zero value is not usable; see New.
// Its methods are safe for concurrent use.
type Queue[T any] struct {
	mu    sync.Mutex
	ready sync.Cond
	lines map[string]*line[T] // keys with waiting items
	cur   *line[T]            // the next line served; nil when nothing waits
	// lastKey is the key served last (when served is set), whose line may have emptied since.
	lastKey string
	served  bool
	n       int // items waiting
	closed  bool
	spare   *line[T] // an emptied line kept for the next key that comes, to spare an allocation
}

// line is one key's waiting items, a link in the circular rotation of the lines with items.
type line[T any] struct {
	key        string
	items      []T
	head       int
	prev, next *line[T]
}

// New returns an empty queue.
func New[T any]() *Queue[T] {
	q := &Queue[T]{lines: map[string]*line[T]{}}
	q.ready.L = &q.mu
	return q
}

// Push adds v to key's line and wakes one waiting Pop. Pushing to a closed queue panics, as a send
// on a closed channel does.
func (q *Queue[T]) Push(key string, v T) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		panic("fairq: push to a closed queue")
	}
	l := q.lines[key]
	if l == nil {
		// Into the rotation after every line waiting since the latest turn and before the line of
		// the key that had it: a newcomer is not made to wait for a second turn of the key just
		// served. Without such a line, at the end of the round.
		var last *line[T]
		if q.served {
			last = q.lines[q.lastKey]
		}
		l = q.spare
		q.spare = nil
		if l == nil {
			l = &line[T]{}
		}
		l.key = key
		q.lines[key] = l
		switch {
		case q.cur == nil:
			l.prev, l.next = l, l
			q.cur = l
		case last != nil:
			l.prev, l.next = last.prev, last
			last.prev.next = l
			last.prev = l
			if q.cur == last {
				q.cur = l // the key just served was next again: it was alone
			}
		default:
			l.prev, l.next = q.cur.prev, q.cur
			q.cur.prev.next = l
			q.cur.prev = l
		}
	}
	l.items = append(l.items, v)
	q.n++
	q.mu.Unlock()
	q.ready.Signal()
}

// Pop removes and returns the next item, waiting for one while the queue is empty and open. It
// returns false once the queue is closed and empty: items pushed before Close are still served.
func (q *Queue[T]) Pop() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.cur == nil {
		if q.closed {
			var zero T
			return zero, false
		}
		q.ready.Wait()
	}
	l := q.cur
	v := l.items[l.head]
	var zero T
	l.items[l.head] = zero // the queue keeps no reference to what it handed out
	l.head++
	q.n--
	if l.head < len(l.items) {
		if l.head >= 64 && 2*l.head >= len(l.items) {
			// A line that never empties would otherwise grow without end: move what waits to the
			// front once the served half is the larger (amortized O(1) an item).
			k := copy(l.items, l.items[l.head:])
			clear(l.items[k:])
			l.items, l.head = l.items[:k], 0
		}
		q.cur, q.lastKey, q.served = l.next, l.key, true
		return v, true
	}
	// The line is empty: out of the rotation.
	q.lastKey, q.served = l.key, true
	delete(q.lines, l.key)
	if l.next == l {
		q.cur = nil
	} else {
		l.prev.next, l.next.prev = l.next, l.prev
		q.cur = l.next
	}
	if cap(l.items) <= 1024 {
		l.items, l.head, l.prev, l.next, l.key = l.items[:0], 0, nil, nil, ""
		q.spare = l
	}
	return v, true
}

// Len returns how many items wait.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Close marks the queue closed and wakes every waiting Pop: they return the items left, then false.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.ready.Broadcast()
}
