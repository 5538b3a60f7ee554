package pronto

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestInsertAnnouncements: one announcement per queue, due now when any of its jobs is available,
// else at its earliest scheduled job; pending and finished rows announce nothing, nor the holders a
// unique insert met (Duplicate): their own insert announced them.
func TestInsertAnnouncements(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := []*JobRow{
		{Queue: "a", State: store.StateScheduled, ScheduledAt: t0.Add(time.Hour)},
		{Queue: "a", State: store.StateScheduled, ScheduledAt: t0.Add(time.Minute)},
		{Queue: "b", State: store.StateScheduled, ScheduledAt: t0},
		{Queue: "b", State: store.StateAvailable},
		{Queue: "c", State: store.StatePending},
		{Queue: "d", State: store.StateCompleted},
		{Queue: "e", State: store.StateAvailable},
		{Queue: "e", State: store.StateScheduled, ScheduledAt: t0},
		{Queue: "f", State: store.StateAvailable, Duplicate: true},
		{Queue: "a", State: store.StateScheduled, ScheduledAt: t0, Duplicate: true},
	}
	require.Equal(t, []store.Notification{
		{Kind: store.NotifyInsert, Queue: "a", DueAt: t0.Add(time.Minute)},
		{Kind: store.NotifyInsert, Queue: "b"},
		{Kind: store.NotifyInsert, Queue: "e"},
	}, insertAnnouncements(rows))
}
