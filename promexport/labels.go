package promexport

import (
	"sync"
	"sync/atomic"
)

// DefaultMaxLabelValues is Options.MaxLabelValues's default.
const DefaultMaxLabelValues = 1000

// OtherLabel stands for the label values beyond Options.MaxLabelValues.
const OtherLabel = "other"

// labelCap bounds the distinct values of one label (queue or type): the first max values are
// exported as they are, later ones as OtherLabel. Job types and queue names come from whoever
// enqueues (any client of the HTTP API), and a counter's series are never dropped, so without a
// bound one client could grow the process's memory and Prometheus's storage at will.
type labelCap struct {
	max  int64
	n    atomic.Int64
	mu   sync.Mutex
	seen sync.Map // value -> struct{}
}

func newLabelCap(max int) *labelCap { return &labelCap{max: int64(max)} }

// value returns v, or OtherLabel once max other values were seen first.
func (c *labelCap) value(v string) string {
	if _, ok := c.seen.Load(v); ok {
		return v
	}
	if c.n.Load() >= c.max {
		return OtherLabel
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen.Load(v); ok {
		return v
	}
	if c.n.Load() >= c.max {
		return OtherLabel
	}
	c.seen.Store(v, struct{}{})
	c.n.Add(1)
	return v
}
