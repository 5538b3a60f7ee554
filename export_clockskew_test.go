package pronto

import (
	"sync"
	"testing"
	"time"
)

// skewed holds, per client, how far off the tests made its clock (SetProcessSkew).
var skewed sync.Map // *Client -> time.Duration

func init() {
	f := func(c *Client) time.Duration {
		if d, ok := skewed.Load(c); ok {
			return d.(time.Duration)
		}
		return 0
	}
	processSkew.Store(&f)
}

// SetProcessSkew makes c's own wall clock read skew off the true time until the test ends (tests
// only): c then plays a process on a machine whose clock is wrong.
func SetProcessSkew(t testing.TB, c *Client, skew time.Duration) {
	skewed.Store(c, skew)
	t.Cleanup(func() { skewed.Delete(c) })
}
