package skewclock

import (
	"testing"
	"time"
)

type cleanups struct{ fs []func() }

func (c *cleanups) Cleanup(f func()) { c.fs = append(c.fs, f) }
func (c *cleanups) run() {
	for i := len(c.fs) - 1; i >= 0; i-- {
		c.fs[i]()
	}
}

// TestSkewOneObjectUntilCleanup: a skew moves one object's clock only, and only until its test's
// cleanup; setting it twice is undone by either cleanup.
func TestSkewOneObjectUntilCleanup(t *testing.T) {
	var c Clock[string]
	near := func(got time.Time, off time.Duration) bool {
		d := got.Sub(time.Now().Add(off))
		return d > -time.Minute && d < time.Minute
	}
	if !near(c.Now("a"), 0) {
		t.Fatal("zero clock is not time.Now")
	}
	var tc cleanups
	c.Skew(&tc, "a", time.Hour)
	if !near(c.Now("a"), time.Hour) || !near(c.Now("b"), 0) {
		t.Fatalf("a %v, b %v", c.Now("a"), c.Now("b"))
	}
	c.Skew(&tc, "a", -time.Hour)
	if !near(c.Now("a"), -time.Hour) {
		t.Fatalf("a after a second skew %v", c.Now("a"))
	}
	tc.run()
	if !near(c.Now("a"), 0) || c.skewed.Load() != 0 {
		t.Fatalf("after cleanup: a %v, skewed %d", c.Now("a"), c.skewed.Load())
	}
}
