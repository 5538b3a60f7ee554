package storetest

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// BenchHarness makes the stores the benchmarks run against.
type BenchHarness struct {
	// New returns a fresh, migrated, empty store, closed by the harness when the benchmark ends.
	New func(b *testing.B) store.Store
}

// RunBenchmarks measures the store's hot paths, each reporting its throughput as jobs/s:
//
//   - InsertSingle, InsertBatch100, InsertBatch1000: Insert of one job, 100 or 1000 per call.
//   - ClaimFinish1, ClaimFinish100: one Claim and one Finish (completed) of 1 or 100 jobs per op.
//   - ClaimFinish1Tenants10k, ClaimFinish100Tenants10k: the same with every job of one of 10,000
//     tenants (a fair claim, which takes jobs in turns across the tenants).
//   - ClaimFinish100Tenants1: the same with every job of one tenant (a tenant alone, which a fair
//     claim serves as the plain claim does).
//   - ClaimFinish1Tenants2, ClaimFinish100Tenants2: the same over 2 tenants (a flood: each tenant's
//     turn takes many jobs).
//   - Heartbeat100: one Heartbeat extending the leases of 100 active jobs per op.
//
// Set-up work (inserting the jobs a claim benchmark drains, deleting finished ones) runs with the
// timer stopped.
func RunBenchmarks(b *testing.B, h BenchHarness) {
	if h.New == nil {
		b.Fatal("storetest: BenchHarness.New is nil")
	}
	for _, n := range []struct {
		name string
		size int
	}{{"InsertSingle", 1}, {"InsertBatch100", 100}, {"InsertBatch1000", 1000}} {
		b.Run(n.name, func(b *testing.B) { benchInsert(b, h, n.size) })
	}
	b.Run("ClaimFinish1", func(b *testing.B) { benchClaimFinish(b, h, 1, 0) })
	b.Run("ClaimFinish100", func(b *testing.B) { benchClaimFinish(b, h, 100, 0) })
	b.Run("ClaimFinish1Tenants10k", func(b *testing.B) { benchClaimFinish(b, h, 1, 10_000) })
	b.Run("ClaimFinish100Tenants10k", func(b *testing.B) { benchClaimFinish(b, h, 100, 10_000) })
	b.Run("ClaimFinish100Tenants1", func(b *testing.B) { benchClaimFinish(b, h, 100, 1) })
	b.Run("ClaimFinish1Tenants2", func(b *testing.B) { benchClaimFinish(b, h, 1, 2) })
	b.Run("ClaimFinish100Tenants2", func(b *testing.B) { benchClaimFinish(b, h, 100, 2) })
	b.Run("Heartbeat100", func(b *testing.B) { benchHeartbeat(b, h, 100) })
}

var benchArgs = json.RawMessage(`[{"user_id":12345,"template":"welcome"}]`)

func benchParams(queue string, n int) []*store.InsertParams {
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "bench", Queue: queue, Args: benchArgs,
			State: store.StateAvailable, MaxAttempts: 25}
	}
	return ps
}

func reportJobs(b *testing.B, jobs int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(jobs)/s, "jobs/s")
	}
}

// rotateEvery bounds how many jobs an insert benchmark piles into one store before it starts a new
// one (timer stopped), so long runs of a fast store do not measure a huge heap instead.
const rotateEvery = 200_000

func benchInsert(b *testing.B, h BenchHarness, size int) {
	s := h.New(b)
	c := b.Context()
	inStore := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if inStore >= rotateEvery {
			b.StopTimer()
			s = h.New(b)
			inStore = 0
			b.StartTimer()
		}
		if _, err := s.Insert(c, benchParams("bench", size)); err != nil {
			b.Fatal(err)
		}
		inStore += size
	}
	b.StopTimer()
	reportJobs(b, b.N*size)
}

// benchClaimFinish claims and finishes size jobs per op; with tenants > 0 the jobs are spread over
// that many tenants, round-robin.
func benchClaimFinish(b *testing.B, h BenchHarness, size, tenants int) {
	s := h.New(b)
	c := b.Context()
	queued := 0
	refill := func(remaining int) {
		// Delete what earlier rounds finished, then queue enough jobs for a while.
		for {
			n, err := s.Cleanup(c, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 10_000})
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		want := min(remaining*size, max(10_000, size))
		if tenants > 0 {
			want = max(want, 2*tenants) // every tenant waits with a job or two
		}
		for want > 0 {
			n := min(want, 1000)
			ps := benchParams("bench", n)
			for _, p := range ps {
				if tenants > 0 {
					p.Tenant = "tenant-" + strconv.Itoa(queued%tenants)
				}
				queued++
			}
			if _, err := s.Insert(c, ps); err != nil {
				b.Fatal(err)
			}
			want -= n
		}
	}
	cs := make([]store.Completion, 0, size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if queued < size {
			b.StopTimer()
			refill(b.N - i)
			b.StartTimer()
		}
		jobs, err := s.Claim(c, store.ClaimParams{Queue: "bench", Kinds: []string{"bench"}, Limit: size,
			WorkerID: "bench-worker", LeaseDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != size {
			b.Fatalf("claimed %d jobs, want %d", len(jobs), size)
		}
		queued -= len(jobs)
		cs = cs[:0]
		for _, j := range jobs {
			cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted})
		}
		res, err := s.Finish(c, cs)
		if err != nil {
			b.Fatal(err)
		}
		if len(res) != size || !res[0].Applied {
			b.Fatal("completions not applied")
		}
	}
	b.StopTimer()
	reportJobs(b, b.N*size)
}

func benchHeartbeat(b *testing.B, h BenchHarness, size int) {
	s := h.New(b)
	c := b.Context()
	if _, err := s.Insert(c, benchParams("bench", size)); err != nil {
		b.Fatal(err)
	}
	jobs, err := s.Claim(c, store.ClaimParams{Queue: "bench", Limit: size, WorkerID: "bench-worker",
		LeaseDuration: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if len(jobs) != size {
		b.Fatalf("claimed %d jobs, want %d", len(jobs), size)
	}
	p := store.HeartbeatParams{WorkerID: "bench-worker", LeaseDuration: time.Minute}
	for _, j := range jobs {
		p.IDs = append(p.IDs, j.ID)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		lost, err := s.Heartbeat(c, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(lost) != 0 {
			b.Fatalf("lost %d jobs", len(lost))
		}
	}
	b.StopTimer()
	reportJobs(b, b.N*size)
}
