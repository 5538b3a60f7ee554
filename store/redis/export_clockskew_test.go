package redis

import (
	"testing"
	"time"
)

// setProcessSkew makes s's process clock read skew off the true time until the test ends: s then
// plays a store on a machine whose clock is wrong.
func setProcessSkew(t testing.TB, s *Store, skew time.Duration) { processClock.Skew(t, s, skew) }
