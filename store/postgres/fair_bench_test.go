package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkFairClaim measures one claim of 50 jobs from a queue of 100,000 jobs of one tenant
// (with -benchtime=1000x, 1,000 claims drain half of it) against the same claim of the same jobs
// without a tenant, and against the fair claims of earlier migrations:
//
//   - plain: the jobs without a tenant;
//   - fair-011, fair-014: the fair claims of migrations 011 and 014 (the migrations from 014, or
//     from 015, reverted);
//   - fair-029: the fair claim of migration 029, whose probes scan in claim order (migration 030
//     reverted);
//   - fair: the current one, which claims a tenant alone through the plain claim's probe, and
//     whose probes walk priorities (migration 030).
//
// Each has a schema of its own, and every iteration claims once from each in turn, so that a
// change in the machine's load touches them all alike. It reports the median and 95th percentile of
// each one's claims (ns/op is the four claims together).
func BenchmarkFairClaim(b *testing.B) {
	benchClaim(b, []claimVariant{{name: "plain"}, {name: "fair-011", tenant: "a", revert: "fair_faster"},
		{name: "fair-014", tenant: "a", revert: "fair_solo"},
		{name: "fair-029", tenant: "a", revert: "fair_claim_walks_priorities"}, {name: "fair", tenant: "a"}}, false)
}

// BenchmarkFairClaimMixed is BenchmarkFairClaim's queue of 100,000 jobs of tenant a with a second
// tenant, b, that inserts one job before every claim (tenant_flood's trickle, at the claims'
// pace): every claim meets two tenants and takes b's job and 49 of a's. It compares the fair claim
// of migration 015 (which walks the rotation with a probe of its own per turn, passing again over
// the front of a's range) and that of migration 029 with the current one (whose turns of a take
// the jobs its first probe locked, and whose probes walk priorities).
func BenchmarkFairClaimMixed(b *testing.B) {
	benchClaim(b, []claimVariant{{name: "fair-015", tenant: "a", revert: "fair_supply"},
		{name: "fair-029", tenant: "a", revert: "fair_claim_walks_priorities"}, {name: "fair", tenant: "a"}}, true)
}

// BenchmarkLimitedClaim is BenchmarkFairClaim's claim of 50 jobs from a queue of 100,000 through
// the rate-limited claim (claim_limited_untokened): four jobs in five carry one of four rate keys
// whose limits always have room, the fifth none. It compares the claim of migration 029, whose
// looks for due jobs scan in claim order, with the current one, which walks priorities (migration
// 031), beside the plain claim of the same jobs without keys as a yardstick.
func BenchmarkLimitedClaim(b *testing.B) {
	benchClaim(b, []claimVariant{{name: "plain"}, {name: "limited-029", keys: 4, revert: "limited_claim_walks_priorities"},
		{name: "limited", keys: 4}}, false)
}

// claimVariant is one schema of benchClaim: its jobs' tenant ("" for none), the number of rate keys
// its jobs take in turn (0 for none; every fifth job has none), and the first migration reverted
// ("" for none; reverting one reverts the ones after it too).
type claimVariant struct {
	name, tenant string
	keys         int
	revert       string
}

func benchClaim(b *testing.B, variants []claimVariant, mixed bool) {
	from := func(name string) int {
		if name == "" {
			return 0
		}
		i := slices.IndexFunc(migrations, func(m migration) bool { return m.name == name })
		if i < 0 {
			b.Fatalf("no migration %s", name)
		}
		return len(migrations) - i
	}
	ctx := context.Background()
	n := 100_000
	if b.N*50 > n/2 {
		n = 2 * b.N * 50
	}
	stores := make([]*Store, len(variants))
	for i, c := range variants {
		s := setup(b)
		if down := from(c.revert); down > 0 {
			if err := s.MigrateDown(ctx, down); err != nil {
				b.Fatal(err)
			}
		}
		for k := range c.keys {
			if err := s.SetRateLimit(ctx, fmt.Sprint("k", k), store.RateLimit{MaxActive: 10 * n}); err != nil {
				b.Fatal(err)
			}
		}
		batch := make([]*store.InsertParams, 0, 1000)
		for k := range n {
			p := params("fair")
			p.Tenant = c.tenant
			if c.keys > 0 && k%5 != 0 {
				p.RateKey = fmt.Sprint("k", k%c.keys)
			}
			batch = append(batch, p)
			if len(batch) == cap(batch) || k == n-1 {
				if _, err := s.Insert(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		stores[i] = s
	}
	took := make([][]time.Duration, len(variants))
	b.ResetTimer()
	for range b.N {
		for i, s := range stores {
			if mixed {
				p := params("fair")
				p.Tenant = "b"
				if _, err := s.Insert(ctx, []*store.InsertParams{p}); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			jobs, err := s.Claim(ctx, claimParams("fair", 50))
			if err != nil {
				b.Fatal(err)
			}
			took[i] = append(took[i], time.Since(start))
			if len(jobs) != 50 {
				b.Fatalf("%s: claimed %d jobs, want 50", variants[i].name, len(jobs))
			}
		}
	}
	b.StopTimer()
	for i, c := range variants {
		slices.Sort(took[i])
		b.ReportMetric(float64(took[i][len(took[i])/2].Microseconds())/1000, c.name+"-p50-ms")
		b.ReportMetric(float64(took[i][len(took[i])*95/100].Microseconds())/1000, c.name+"-p95-ms")
	}
}
