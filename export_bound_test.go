package pronto

import "time"

// SetQueueDepthRecount sets how often c rereads a bounded queue's depth (tests only): a long interval
// makes the client's own counting of its inserts all a test sees.
func SetQueueDepthRecount(c *Client, every time.Duration) {
	c.bp.mu.Lock()
	c.bp.depthEvery = every
	c.bp.mu.Unlock()
}
