package server

import (
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestSchedStarvationWindow: starvation prevention counts only the dispatches of the last rotation
// interval (times given, no clock), and reorders a weighted pool too.
func TestSchedStarvationWindow(t *testing.T) {
	p := &pronto.WorkerPool{Name: "p", Queues: []string{"a", "b"}, Strategy: pronto.PoolStrategyWeighted,
		Weights:              map[string]int{"a": 100},
		StarvationPrevention: &pronto.StarvationPrevention{Enabled: true, RotationInterval: time.Minute, MinDispatchRatio: 0.2}}
	var s sched
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	order := func(p *pronto.WorkerPool, now time.Time) string {
		qs := []string{"a", "b"}
		s.order(p, qs, nil, now)
		return strings.Join(qs, ",")
	}
	if got := order(p, t0); got != "a,b" {
		t.Fatalf("no dispatch yet: %s", got)
	}
	for range 10 {
		s.served(p, []string{"a", "b"}, []*pronto.JobRow{{Queue: "a"}}, t0)
	}
	if got := order(p, t0.Add(time.Second)); got != "b,a" {
		t.Fatalf("b, with none of 10 dispatches, not first: %s", got)
	}
	// A minute and more later the window is empty again: the weights alone decide.
	if got := order(p, t0.Add(2*time.Minute)); got != "a,b" {
		t.Fatalf("after the window: %s", got)
	}
	// A change of the pool's config starts its turns and window afresh, keeping its counts.
	p2 := *p
	p2.Weights = map[string]int{"a": 50}
	if got := order(&p2, t0.Add(time.Second)); got != "a,b" {
		t.Fatalf("after a config change: %s", got)
	}
	if total, counts := s.poolCounts(p); total != 10 || counts["a"] != 10 {
		t.Fatalf("counts %d %v", total, counts)
	}
}
