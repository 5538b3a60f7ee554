package server

import (
	"sync"
	"testing"
	"time"
)

// skewed holds, per server, how far off the tests made its process's clock (setProcessSkew).
var skewed sync.Map // *Server -> time.Duration

func init() {
	f := func(s *Server) time.Duration {
		if d, ok := skewed.Load(s); ok {
			return d.(time.Duration)
		}
		return 0
	}
	processSkew.Store(&f)
}

// setProcessSkew makes s read its process's clock skew off the true time until the test ends: s
// then plays a server on a machine whose clock is wrong.
func setProcessSkew(t testing.TB, s *Server, skew time.Duration) {
	skewed.Store(s, skew)
	t.Cleanup(func() { skewed.Delete(s) })
}
