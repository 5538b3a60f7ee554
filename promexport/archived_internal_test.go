package promexport

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pronto-jobs/pronto"
)

// TestPrunedArchivedCounters: every pruned job counts in ojs_dead_letter_pruned_total, and those the
// archive kept first (pruning_policy archive) in pronto_dead_letter_archived_total too.
func TestPrunedArchivedCounters(t *testing.T) {
	m := New(nil)
	pruned := func(count int, archived bool) {
		m.observe(&pronto.Event{Kind: pronto.EventDeadLetterPruned, Job: &pronto.JobRow{Queue: "billing"},
			Count: count, Archived: archived, At: time.Now()})
	}
	pruned(3, true)
	pruned(2, false)
	if got := value(t, m.deadPruned.WithLabelValues("billing")); got != 5 {
		t.Fatalf("pruned %v, want 5", got)
	}
	if got := value(t, m.deadArchived.WithLabelValues("billing")); got != 3 {
		t.Fatalf("archived %v, want 3", got)
	}
}

// value reads a counter's value.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
