package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkPickup measures what a producer sees: from the moment Insert returns (the insert has
// committed) until the notification arrives and a Claim has made the job active. It reports the
// median and 95th percentile of that pickup time, and the median notification delay alone (which
// can be slightly negative: the listener may hear the commit before Insert's reply arrives).
func BenchmarkPickup(b *testing.B) {
	ctx := context.Background()
	s := setup(b)
	woken := make(chan time.Time, 16)
	unsubscribe := s.Notifier().Subscribe(func(n store.Notification) {
		if n.Kind == store.NotifyInsert {
			woken <- time.Now()
		}
	})
	defer unsubscribe()
	pickup := make([]time.Duration, 0, b.N)
	notify := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if _, err := s.Insert(ctx, []*store.InsertParams{params("pickup")}); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		var at time.Time
		select {
		case at = <-woken:
		case <-time.After(10 * time.Second):
			b.Fatal("no notification")
		}
		jobs, err := s.Claim(ctx, claimParams("pickup", 10))
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 1 {
			b.Fatalf("claimed %d jobs, want 1", len(jobs))
		}
		pickup = append(pickup, time.Since(committed))
		notify = append(notify, at.Sub(committed))
	}
	b.StopTimer()
	slices.Sort(pickup)
	slices.Sort(notify)
	b.ReportMetric(float64(pickup[len(pickup)/2].Microseconds())/1000, "pickup-p50-ms")
	b.ReportMetric(float64(pickup[len(pickup)*95/100].Microseconds())/1000, "pickup-p95-ms")
	b.ReportMetric(float64(notify[len(notify)/2].Microseconds())/1000, "notify-p50-ms")
}
