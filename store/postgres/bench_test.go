package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// BenchmarkFinishAndClaim measures a lever of issue 16: writing a batch's outcomes and claiming the
// next batch in one round trip. Each op completes the 100 jobs the previous op claimed and claims the
// next 100 for the same worker, either "apart", as the client does today (Finish, then Claim: two
// round trips and two transactions, the claim's committed without waiting for its WAL flush), or
// "together" in one pgx batch (finishClaimTogether: one round trip and one implicit transaction,
// which commits durably because the outcomes must). It reports wall time and the client's CPU per
// op; the database's CPU is not in it.
func BenchmarkFinishAndClaim(b *testing.B) {
	const size = 100
	for _, mode := range []string{"apart", "together"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s := setup(b)
			for left := (b.N + 1) * size; left > 0; left -= 1000 {
				ps := make([]*store.InsertParams, min(left, 1000))
				for i := range ps {
					ps[i] = params("fc")
				}
				if _, err := s.Insert(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
			p := claimParams("fc", size)
			jobs, err := s.Claim(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			before := cpuTime()
			b.ResetTimer()
			for range b.N {
				cs := make([]store.Completion, len(jobs))
				for i, j := range jobs {
					cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
				}
				var applied int
				if mode == "apart" {
					res, err := s.Finish(ctx, cs)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range res {
						if r.Applied {
							applied++
						}
					}
					jobs, err = s.Claim(ctx, p)
					if err != nil {
						b.Fatal(err)
					}
				} else {
					jobs, applied, err = finishClaimTogether(ctx, s, cs, p)
					if err != nil {
						b.Fatal(err)
					}
				}
				if applied != len(cs) || len(jobs) != size {
					b.Fatalf("applied %d of %d outcomes and claimed %d jobs, want all and %d", applied, len(cs), len(jobs), size)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// finishClaimTogether writes the outcomes cs and claims for p in one round trip: the store's claim
// and finish statements in one pgx batch, so one implicit transaction, with synchronous_commit set
// back on last so that the outcomes are as durable as Finish makes them. It returns the claimed jobs
// and how many outcomes were applied.
func finishClaimTogether(ctx context.Context, s *Store, cs []store.Completion, p store.ClaimParams) ([]*store.Job, int, error) {
	ids, order := finishOrder(cs)
	if len(order) != len(cs) {
		return nil, 0, fmt.Errorf("%d of %d job ids are no UUIDs", len(cs)-len(order), len(cs))
	}
	args, err := finishArgs(cs, ids, order)
	if err != nil {
		return nil, 0, err
	}
	bt := &pgx.Batch{}
	bt.Queue(s.q.claimPlan, p.Queue, newClaimTag())
	bt.Queue(s.q.claim, p.Queue, p.Limit, p.LeaseDuration.Microseconds(), p.WorkerID)
	bt.Queue(s.q.finishPlan)
	bt.Queue(s.q.finish, args...)
	bt.Queue(`SELECT set_config('synchronous_commit', 'on', true)`)
	br := s.pool.SendBatch(ctx, bt)
	defer br.Close()
	jobs, mode, err := claimResults(br)
	if err != nil {
		return nil, 0, err
	}
	if mode != "off" {
		return nil, 0, fmt.Errorf("claim mode %q: the benchmark's queue has no rate keys nor tenants", mode)
	}
	if _, err := br.Exec(); err != nil {
		return nil, 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	applied := 0
	for rows.Next() {
		applied++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, 0, err
	}
	return jobs, applied, br.Close()
}
