package postgres

import (
	"context"
	"slices"
	"strconv"
	"syscall"
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

// BenchmarkClaimFinishCPU claims and completes 1 or 100 jobs per op, like the shared ClaimFinish
// benchmarks, and reports the process's CPU time per op (user and system, getrusage) over the
// timed loop only: what the store costs the client, which wall time per op, dominated by the
// database, hides.
func BenchmarkClaimFinishCPU(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			ctx := context.Background()
			s := setup(b)
			for left := b.N * size; left > 0; left -= 1000 {
				ps := make([]*store.InsertParams, min(left, 1000))
				for i := range ps {
					ps[i] = params("cpu")
				}
				if _, err := s.Insert(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
			cs := make([]store.Completion, 0, size)
			b.ReportAllocs()
			before := cpuTime()
			b.ResetTimer()
			for range b.N {
				jobs, err := s.Claim(ctx, claimParams("cpu", size))
				if err != nil {
					b.Fatal(err)
				}
				cs = cs[:0]
				for _, j := range jobs {
					cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken,
						State: store.StateCompleted})
				}
				if _, err := s.Finish(ctx, cs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
