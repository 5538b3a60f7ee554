package dashboard

import "time"

// StreamCounts returns the event streams of this process open now and ever started, for the tests
// that check a page reconnecting holds one.
func StreamCounts() (open, started int64) { return streamsOpen.Load(), streamsStarted.Load() }

// SetMatchBounds lowers h's bounds of one bulk action and of one filtered read (maxBulk and
// maxMatchScan), so that a test can pass them with a few jobs.
func SetMatchBounds(h *Handler, bulk, scan int) { h.maxBulk, h.maxScan = bulk, scan }

// SetBulkBatch lowers the most jobs one step of h's bulk actions reads or acts on
// (pronto.MaxBulkIDs), so that a test can run one in several steps with a few jobs.
func SetBulkBatch(h *Handler, n int) { h.batch = n }

// SetLoginClock makes h's login throttle read the time from now.
func SetLoginClock(h *Handler, now func() time.Time) {
	h.logins.mu.Lock()
	defer h.logins.mu.Unlock()
	h.logins.now = now
}
