package cancelset

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCancels: a run's cancellation is remembered for Kept by job id and token (another
// run of the job is not cancelled), one without a token is not, and old ones are swept by a later Add.
func TestCancels(t *testing.T) {
	var c Set
	t0 := time.Now()
	require.False(t, c.Has("a", "t1", t0))
	c.Add("a", "t1", t0)
	require.True(t, c.Has("a", "t1", t0.Add(Kept-time.Millisecond)))
	require.False(t, c.Has("a", "t2", t0), "another run of the job")
	require.False(t, c.Has("a", "t1", t0.Add(Kept)), "forgotten after Kept")
	c.Add("b", "", t0)
	require.False(t, c.Has("b", "", t0), "no token, not remembered")
	c.Add("b", "t1", t0.Add(Kept))
	require.Len(t, c.runs, 1, "the old entry is swept")
	require.True(t, c.Has("b", "t1", t0.Add(Kept)))
}

// BenchmarkHasEmpty is the cost a client pays per run it starts when nothing was cancelled.
func BenchmarkHasEmpty(b *testing.B) {
	var c Set
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if c.Has("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "7f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", now) {
			b.Fatal("empty set")
		}
	}
}
