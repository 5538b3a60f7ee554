package pronto

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCostlyQueueCount: QueueList reuses a count only when it is both slow and of many jobs, so
// that a loaded machine never makes a small store's counts stale.
func TestCostlyQueueCount(t *testing.T) {
	many := []QueueInfo{
		{Name: "a", Counts: map[State]int64{StateCompleted: costlyCountJobs - 10, StateAvailable: 5}},
		{Name: "b", Counts: map[State]int64{StateDiscarded: 5}},
	}
	few := []QueueInfo{{Name: "a", Counts: map[State]int64{StateAvailable: costlyCountJobs - 1}}}
	require.True(t, costlyQueueCount(many, costlyCountTook))
	require.False(t, costlyQueueCount(many, costlyCountTook-time.Millisecond), "fast")
	require.False(t, costlyQueueCount(few, time.Minute), "slow, but few jobs")
	require.False(t, costlyQueueCount(nil, time.Minute))

	// Callers get copies of a reused count.
	c := cloneQueueInfos(many)
	c[0].Counts[StateAvailable] = 0
	c[1].Name = "x"
	require.Equal(t, int64(5), many[0].Counts[StateAvailable])
	require.Equal(t, "b", many[1].Name)
}
