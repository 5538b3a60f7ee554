package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkClaimBesideAScheduledBacklog measures a claim of a queue whose only jobs are 100,000
// scheduled and retrying an hour or more from now: the claim finds nothing, after passing over the
// whole backlog in pronto_jobs_claim, the worst case of a claim that finds fewer jobs than its limit
// (an idle queue's claim at every insert and poll while retries wait). The file is not analyzed,
// as the store never analyzes its files: with statistics SQLite finds a better plan for the old
// single-scan claim by itself (0.3 ms), without them that claim read every entry of the backlog
// (11-12 ms); the claim that walks the queue's priorities takes 0.3 ms either way.
func BenchmarkClaimBesideAScheduledBacklog(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	fillLater(b, s, 100_000, map[string]string{"queue": "'q'", "state": "CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END"})
	p := store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute}
	b.ResetTimer()
	for range b.N {
		jobs, err := s.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 0 {
			b.Fatalf("claimed %d jobs of a backlog due in an hour", len(jobs))
		}
	}
}

// BenchmarkFairClaimBesideATenantBacklog measures a fair claim of a queue where tenant a has 100,000
// retries due in an hour and more: each op inserts jobs due now (one of a and one of b, or one of b
// alone) and claims them. Before the fair claim's statements walked priorities and its walk over
// tenants asked each whether it had a job due, each claim passed over a's backlog, in the writer's
// transaction: 34 ms (a and b due) and 12.7 ms (b alone) an op.
func BenchmarkFairClaimBesideATenantBacklog(b *testing.B) {
	for _, tenants := range [][]string{{"a", "b"}, {"b"}} {
		b.Run(strings.Join(tenants, "+")+" due", func(b *testing.B) {
			ctx := context.Background()
			s := openTest(b)
			fillLater(b, s, 100_000, map[string]string{"queue": "'tq'", "tenant": "'a'"})
			p := store.ClaimParams{Queue: "tq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, tenant := range tenants {
					ps := params("tq", 1)
					ps[0].Tenant = tenant
					if _, err := s.Insert(ctx, ps); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				jobs, err := s.Claim(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				if len(jobs) != len(tenants) {
					b.Fatalf("claimed %d jobs, want %d", len(jobs), len(tenants))
				}
			}
		})
	}
}

// BenchmarkLimitedClaimBesideAKeyBacklog measures a claim of a queue where a rate key has 100,000
// retries due in an hour and more: each op inserts one job of the key due now and claims it (the
// limited path). Before the limited claim's candidate pages walked priorities, each claim passed
// over the key's backlog in the writer's transaction: 12 ms an op.
func BenchmarkLimitedClaimBesideAKeyBacklog(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	fillLater(b, s, 100_000, map[string]string{"queue": "'rq'", "rate_key": "'key1'"})
	p := store.ClaimParams{Queue: "rq", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ps := params("rq", 1)
		ps[0].RateKey = "key1"
		if _, err := s.Insert(ctx, ps); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		jobs, err := s.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 1 {
			b.Fatalf("claimed %d jobs, want 1", len(jobs))
		}
	}
}
