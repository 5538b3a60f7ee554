package maintenance

import (
	"sync"
	"testing"
	"time"
)

// skewed holds, per maintainer, how far off the tests made its process's clock (setProcessSkew).
var skewed sync.Map // *Maintainer -> time.Duration

func init() {
	f := func(m *Maintainer) time.Duration {
		if d, ok := skewed.Load(m); ok {
			return d.(time.Duration)
		}
		return 0
	}
	processSkew.Store(&f)
}

// setProcessSkew makes m read its process's clock skew off the true time until the test ends:
// m then plays a leader on a process whose clock is wrong.
func setProcessSkew(t testing.TB, m *Maintainer, skew time.Duration) {
	skewed.Store(m, skew)
	t.Cleanup(func() { skewed.Delete(m) })
}
