package pronto

import (
	"testing"
	"time"
)

// SetProcessSkew makes c's process clock read skew off the true time until the test ends: c then
// plays a client on a machine whose clock is wrong.
func SetProcessSkew(t testing.TB, c *Client, skew time.Duration) { processClock.Skew(t, c, skew) }
