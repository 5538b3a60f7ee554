package memory

// jheap is a binary min-heap of jobs that records each job's position in it, so a job can be removed
// or re-keyed in O(log n) wherever it sits. A job is in at most one primary heap (ready, waiting,
// leases or a terminal heap; position in job.pidx) and at most one secondary heap (the expiry heap;
// position in job.eidx). An index of -1 means "not in such a heap".
type jheap struct {
	items []*job
	less  func(a, b *job) bool
	sec   bool // positions live in job.eidx instead of job.pidx
}

func (h *jheap) len() int { return len(h.items) }

func (h *jheap) top() *job { return h.items[0] }

func (h *jheap) set(i int, j *job) {
	h.items[i] = j
	if h.sec {
		j.eidx = i
	} else {
		j.pidx = i
	}
}

func (h *jheap) push(j *job) {
	h.items = append(h.items, j)
	h.set(len(h.items)-1, j)
	h.up(len(h.items) - 1)
}

// remove takes the job at position i out of the heap.
func (h *jheap) remove(i int) {
	n := len(h.items) - 1
	gone := h.items[i]
	if i != n {
		h.set(i, h.items[n])
	}
	h.items[n] = nil
	h.items = h.items[:n]
	if h.sec {
		gone.eidx = -1
	} else {
		gone.pidx = -1
	}
	if i != n && !h.down(i) {
		h.up(i)
	}
}

// fix restores the heap order after the key of the job at position i changed.
func (h *jheap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *jheap) up(i int) {
	j := h.items[i]
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(j, h.items[p]) {
			break
		}
		h.set(i, h.items[p])
		i = p
	}
	h.set(i, j)
}

// down sifts the job at position i down and reports whether it moved.
func (h *jheap) down(i0 int) bool {
	n := len(h.items)
	j := h.items[i0]
	i := i0
	for {
		c := 2*i + 1
		if c >= n || c < 0 {
			break
		}
		if r := c + 1; r < n && h.less(h.items[r], h.items[c]) {
			c = r
		}
		if !h.less(h.items[c], j) {
			break
		}
		h.set(i, h.items[c])
		i = c
	}
	h.set(i, j)
	return i > i0
}

// readyLess is the claim order: highest priority first, then earliest due, then lowest id.
func readyLess(a, b *job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if c := a.ScheduledAt.Compare(b.ScheduledAt); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// dueLess orders scheduled and retryable jobs by due time.
func dueLess(a, b *job) bool {
	if c := a.ScheduledAt.Compare(b.ScheduledAt); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// leaseLess orders active jobs by the end of their lease.
func leaseLess(a, b *job) bool { return a.LeaseExpiresAt.Before(b.LeaseExpiresAt) }

// completedLess orders terminal jobs by the time they finished.
func completedLess(a, b *job) bool { return a.CompletedAt.Before(b.CompletedAt) }

// expiresLess orders not-yet-started jobs by their expiry.
func expiresLess(a, b *job) bool { return a.ExpiresAt.Before(b.ExpiresAt) }
