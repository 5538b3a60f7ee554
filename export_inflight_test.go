package pronto

// QueueDepthInFlight returns how many jobs c counts as being inserted into bounded queues, in all
// (tests only): 0 once every insert has returned.
func QueueDepthInFlight(c *Client) int64 {
	c.bp.mu.Lock()
	defer c.bp.mu.Unlock()
	var n int64
	for _, k := range c.bp.inflight {
		n += k
	}
	for _, f := range c.bp.flights {
		for _, k := range f {
			n += int64(k)
		}
	}
	return n
}

// TenantInFlight returns how many jobs c counts as being inserted for limited tenants, in all (tests
// only): 0 once every insert has returned.
func TenantInFlight(c *Client) int {
	c.tg.mu.Lock()
	defer c.tg.mu.Unlock()
	n := 0
	for _, a := range c.tg.inflight {
		n += a.all
	}
	for _, f := range c.tg.flights {
		for _, a := range f {
			n += a.all
		}
	}
	return n
}
