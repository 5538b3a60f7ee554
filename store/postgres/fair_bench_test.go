package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkFairClaim measures one claim of 50 jobs from a queue of 100,000 jobs of one tenant
// (with -benchtime=1000x, 1,000 claims drain half of it), side by side: "plain" (the same jobs
// without a tenant), "fair-011" and "fair-014" (the fair claims of migrations 011 and 014: the
// migrations from 014, or from 015, reverted) and "fair" (the current one, which claims a tenant
// alone as the plain claim does). It reports the median and 95th percentile of a claim.
func BenchmarkFairClaim(b *testing.B) {
	// Reverting a migration reverts the ones after it too.
	from := func(name string) int {
		i := slices.IndexFunc(migrations, func(m migration) bool { return m.name == name })
		if i < 0 {
			b.Fatalf("no migration %s", name)
		}
		return len(migrations) - i
	}
	for _, c := range []struct {
		name   string
		tenant string
		down   int
	}{{"plain", "", 0}, {"fair-011", "a", from("fair_faster")}, {"fair-014", "a", from("fair_solo")}, {"fair", "a", 0}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s := setup(b)
			if c.down > 0 {
				if err := s.MigrateDown(ctx, c.down); err != nil {
					b.Fatal(err)
				}
			}
			n := 100_000
			if b.N*50 > n/2 {
				n = 2 * b.N * 50
			}
			batch := make([]*store.InsertParams, 0, 1000)
			for i := range n {
				p := params("fair")
				p.Tenant = c.tenant
				batch = append(batch, p)
				if len(batch) == cap(batch) || i == n-1 {
					if _, err := s.Insert(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				jobs, err := s.Claim(ctx, claimParams("fair", 50))
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if len(jobs) != 50 {
					b.Fatalf("claimed %d jobs, want 50", len(jobs))
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "claim-p50-ms")
			b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "claim-p95-ms")
		})
	}
}
