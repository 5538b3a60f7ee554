package memory

import (
	"math"
	"time"
)

// entry is one job's place in a heap or a FIFO. Its sort key is held inline, so ordering touches only
// the heap's own array: k1, then k2, then the job id (first by a 24-byte prefix, then in full).
//
// Entries are removed lazily: every change of a job's state bumps job.gen, which makes its existing
// entries stale; stale entries are dropped when they surface, and a structure whose stale entries
// outnumber its live ones is compacted.
type entry struct {
	k1, k2 int64
	id     idKey
	j      *job
	gen    uint32
}

func (e *entry) live() bool { return e.gen == e.j.gen }

// idKey is the first 24 bytes of an id, zero-padded, as big-endian words: comparing keys orders ids
// as strings do, except that equal keys need a full comparison. For UUIDv7 ids the prefix covers the
// millisecond timestamp, the sequence and some randomness, so full comparisons are rare.
type idKey [3]uint64

func makeIDKey(id string) idKey {
	var k idKey
	for i := 0; i < 24 && i < len(id); i++ {
		k[i/8] |= uint64(id[i]) << (56 - 8*(i%8))
	}
	return k
}

func (a *entry) less(b *entry) bool {
	if a.k1 != b.k1 {
		return a.k1 < b.k1
	}
	if a.k2 != b.k2 {
		return a.k2 < b.k2
	}
	for i := range a.id {
		if a.id[i] != b.id[i] {
			return a.id[i] < b.id[i]
		}
	}
	return a.j.ID < b.j.ID
}

// nanos is t as Unix nanoseconds, clamped to the representable range (year 1678 to 2262).
func nanos(t time.Time) int64 {
	const maxSec = math.MaxInt64/int64(time.Second) - 1
	switch sec := t.Unix(); {
	case sec > maxSec:
		return math.MaxInt64
	case sec < -maxSec:
		return math.MinInt64
	}
	return t.UnixNano()
}

// jheap is a binary min-heap of entries with lazy removal.
type jheap struct {
	items []entry
	stale int // entries in items whose job has moved on
}

func (h *jheap) len() int { return len(h.items) }

func (h *jheap) push(e entry) {
	h.items = append(h.items, e)
	h.up(len(h.items) - 1)
}

// top drops stale entries from the top and returns the first live one, or nil.
func (h *jheap) top() *entry {
	for len(h.items) > 0 {
		if h.items[0].live() {
			return &h.items[0]
		}
		h.pop()
		h.stale--
	}
	return nil
}

// pop removes the top entry.
func (h *jheap) pop() {
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items[n] = entry{}
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
}

// retire records that one entry of the heap went stale, compacting when stale entries dominate.
func (h *jheap) retire() {
	h.stale++
	if h.stale > 1024 && h.stale*2 > len(h.items) {
		live := h.items[:0]
		for _, e := range h.items {
			if e.live() {
				live = append(live, e)
			}
		}
		clear(h.items[len(live):])
		h.items = live
		h.stale = 0
		for i := len(h.items)/2 - 1; i >= 0; i-- {
			h.down(i)
		}
	}
}

// eachUpTo calls fn for every entry (live or stale) whose k1 is at most k1, visiting only those and
// their children: an entry's children never have a smaller k1 than it.
func (h *jheap) eachUpTo(k1 int64, fn func(*entry)) {
	if len(h.items) == 0 || h.items[0].k1 > k1 {
		return
	}
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		fn(&h.items[i])
		for c := 2*i + 1; c <= 2*i+2 && c < len(h.items); c++ {
			if h.items[c].k1 <= k1 {
				stack = append(stack, c)
			}
		}
	}
}

func (h *jheap) up(i int) {
	e := h.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if !e.less(&h.items[p]) {
			break
		}
		h.items[i] = h.items[p]
		i = p
	}
	h.items[i] = e
}

func (h *jheap) down(i int) {
	n := len(h.items)
	e := h.items[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.items[r].less(&h.items[c]) {
			c = r
		}
		if !h.items[c].less(&e) {
			break
		}
		h.items[i] = h.items[c]
		i = c
	}
	h.items[i] = e
}

// fifo holds terminal jobs in the order they finished, which is the order of their CompletedAt:
// finish times are taken under the store's mutex from the monotonic clock.
type fifo struct {
	items []entry
	head  int
	stale int
}

func (f *fifo) push(e entry) { f.items = append(f.items, e) }

// size returns the number of live entries.
func (f *fifo) size() int { return len(f.items) - f.head - f.stale }

// front drops stale entries from the front and returns the first live one, or nil.
func (f *fifo) front() *entry {
	for f.head < len(f.items) {
		if f.items[f.head].live() {
			return &f.items[f.head]
		}
		f.popFront()
		f.stale--
	}
	return nil
}

func (f *fifo) popFront() {
	f.items[f.head] = entry{}
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
}

// retire records that one entry went stale, compacting when stale entries dominate.
func (f *fifo) retire() {
	f.stale++
	if f.stale > 1024 && f.stale*2 > len(f.items)-f.head {
		live := f.items[:0]
		for _, e := range f.items[f.head:] {
			if e.live() {
				live = append(live, e)
			}
		}
		clear(f.items[len(live):])
		f.items, f.head, f.stale = live, 0, 0
	}
}

// selector picks the heap with the least top entry among a claim's candidate heaps. A few heaps (the
// kinds of a queue) are scanned; many (a queue with many rate keys) are kept in a heap of heaps, so a
// claim costs O(log n) per job rather than O(n).
type selector struct {
	hs      []*jheap
	ordered bool
}

// scanMax is the most heaps a selector scans rather than orders.
const scanMax = 16

func newSelector(hs []*jheap) selector {
	sel := selector{hs: hs}
	if len(hs) > scanMax {
		sel.order()
	}
	return sel
}

// order makes the selector keep its heaps in a heap.
func (sel *selector) order() {
	sel.ordered = true
	for i := len(sel.hs)/2 - 1; i >= 0; i-- {
		sel.down(i)
	}
}

func (sel *selector) empty() bool { return len(sel.hs) == 0 }

// best returns, for an ordered selector, the index of the heap with the least live top entry and
// that entry, or -1 and nil when every heap is empty. (Claim scans an unordered one itself.)
func (sel *selector) best() (int, *entry) {
	for len(sel.hs) > 0 {
		if e := sel.hs[0].top(); e != nil {
			return 0, e
		}
		sel.remove(0)
	}
	return -1, nil
}

// fix restores the order after the top of heap i was popped.
func (sel *selector) fix(i int) {
	if sel.ordered {
		sel.down(i)
	}
}

// remove drops heap i from the candidates.
func (sel *selector) remove(i int) {
	n := len(sel.hs) - 1
	sel.hs[i] = sel.hs[n]
	sel.hs[n] = nil
	sel.hs = sel.hs[:n]
	if sel.ordered && i < n {
		sel.down(i)
		sel.up(i)
	}
}

// before orders heaps by their live top entries, empty heaps last.
func (sel *selector) before(i, k int) bool {
	a, b := sel.hs[i].top(), sel.hs[k].top()
	return a != nil && (b == nil || a.less(b))
}

func (sel *selector) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !sel.before(i, p) {
			return
		}
		sel.hs[i], sel.hs[p] = sel.hs[p], sel.hs[i]
		i = p
	}
}

func (sel *selector) down(i int) {
	n := len(sel.hs)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && sel.before(r, c) {
			c = r
		}
		if !sel.before(c, i) {
			return
		}
		sel.hs[i], sel.hs[c] = sel.hs[c], sel.hs[i]
		i = c
	}
}
