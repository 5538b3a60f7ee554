package maintenance

import (
	"testing"
	"time"
)

// setProcessSkew makes m's process clock read skew off the true time until the test ends: m then
// plays a leader on a machine whose clock is wrong.
func setProcessSkew(t testing.TB, m *Maintainer, skew time.Duration) { processClock.Skew(t, m, skew) }
