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

// BenchmarkSchedServed: what every fetch now adds for the scheduling statistics (a fetch of one job
// naming no pool), and a one-job fetch through a weighted pool with starvation prevention (order
// and served).
func BenchmarkSchedServed(b *testing.B) {
	jobs := []*pronto.JobRow{{Queue: "default"}}
	b.Run("no-pool", func(b *testing.B) {
		var s sched
		now := time.Now()
		for b.Loop() {
			s.served(nil, nil, jobs, now)
		}
	})
	b.Run("weighted-starvation", func(b *testing.B) {
		p := &pronto.WorkerPool{Name: "p", Queues: []string{"default", "low"}, Strategy: pronto.PoolStrategyWeighted,
			Weights:              map[string]int{"default": 3},
			StarvationPrevention: &pronto.StarvationPrevention{Enabled: true, RotationInterval: time.Minute, MinDispatchRatio: 0.05}}
		var s sched
		now := time.Now()
		qs := make([]string, 2)
		for b.Loop() {
			copy(qs, p.Queues)
			s.order(p, qs, nil, now)
			s.served(p, qs, jobs, now)
		}
	})
}
