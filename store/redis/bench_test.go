package redis

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// The benchmarks below measure the store's hot paths one operation at a time against the test
// Redis (compare runs of the same machine only: `go test -bench . -count 5 ./store/redis`).
// With PRONTO_BENCH_RESETSTAT=1 (on a Redis of your own, PRONTO_TEST_REDIS_ADDR) each resets the
// server's statistics as its timer starts, so that `redis-cli INFO commandstats` afterwards counts
// the measured calls only (per-call server time).

// withHistory inserts 1000 jobs into another queue, so that the global id index is past Redis's
// compact small-hash encoding (up to 512 entries, each lookup a scan), as in a store with history:
// the first inserts into an empty store would otherwise measure those scans.
func withHistory(b *testing.B, s *Store) {
	b.Helper()
	batch := make([]*store.InsertParams, 1000)
	for i := range batch {
		batch[i] = benchJob("history")
	}
	if _, err := s.Insert(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
}

// startTimer resets the benchmark's timer and, when asked, the server's command statistics.
func startTimer(b *testing.B, s *Store) {
	b.Helper()
	if os.Getenv("PRONTO_BENCH_RESETSTAT") == "1" {
		if err := s.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
}

func benchJob(queue string) *store.InsertParams {
	return &store.InsertParams{ID: uuidv7.New(), Kind: "bench", Queue: queue, Args: []byte(`[1]`),
		State: store.StateAvailable, MaxAttempts: 3}
}

// BenchmarkInsertOne inserts one job per call (bullmq-bench's queue-add).
func BenchmarkInsertOne(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	withHistory(b, s)
	b.ReportAllocs()
	startTimer(b, s)
	for b.Loop() {
		if _, err := s.Insert(ctx, []*store.InsertParams{benchJob("q")}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInsertBatch50 inserts 50 jobs per call (queue-add-bulk); ns/op is per batch.
func BenchmarkInsertBatch50(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	withHistory(b, s)
	b.ReportAllocs()
	batch := make([]*store.InsertParams, 50)
	startTimer(b, s)
	for b.Loop() {
		for i := range batch {
			batch[i] = benchJob("q")
		}
		if _, err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimFinish claims one job and completes it per op (worker-generic), the jobs inserted
// beforehand in batches outside the timer.
func BenchmarkClaimFinish(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	n := b.N
	for n > 0 {
		k := min(n, 500)
		batch := make([]*store.InsertParams, k)
		for i := range batch {
			batch[i] = benchJob("q")
		}
		if _, err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
	b.ReportAllocs()
	startTimer(b, s)
	for range b.N {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		if err != nil || len(jobs) != 1 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		j := jobs[0]
		if _, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimAfterRateKeys claims one job per op of a queue whose 10,000 earlier jobs each had
// a rate key of its own (one per customer), all run and deleted by retention: what a claim costs
// once many keys have come and gone (each key used to stay a claim source, read by every claim).
func BenchmarkClaimAfterRateKeys(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	const keys = 10000
	for done := 0; done < keys; done += 500 {
		batch := make([]*store.InsertParams, 500)
		for i := range batch {
			batch[i] = benchJob("q")
			batch[i].RateKey = "customer-" + strconv.Itoa(done+i)
		}
		if _, err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 500, WorkerID: "w", LeaseDuration: time.Minute})
		if err != nil || len(jobs) != 500 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		cs := make([]store.Completion, len(jobs))
		for i, j := range jobs {
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
		}
		if _, err := s.Finish(ctx, cs); err != nil {
			b.Fatal(err)
		}
	}
	far := time.Now().Add(time.Hour)
	if _, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: far}); err != nil {
		b.Fatal(err)
	}
	for n := b.N; n > 0; n -= 500 {
		batch := make([]*store.InsertParams, min(n, 500))
		for i := range batch {
			batch[i] = benchJob("q")
		}
		if _, err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	startTimer(b, s)
	for range b.N {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		if err != nil || len(jobs) != 1 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
	}
}

// BenchmarkClaimFinishBatch claims 100 jobs a call and finishes them in one call, as a client with
// many workers draining a backlog does: it reports the Redis server's CPU per job (used_cpu_sys +
// used_cpu_user of INFO cpu over the loop; run against a Redis of its own for a clean figure).
func BenchmarkClaimFinishBatch(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	const per = 100
	n := max(b.N, per)
	for left := n; left > 0; {
		k := min(left, 500)
		batch := make([]*store.InsertParams, k)
		for i := range batch {
			batch[i] = benchJob("q")
		}
		if _, err := s.Insert(ctx, batch); err != nil {
			b.Fatal(err)
		}
		left -= k
	}
	startTimer(b, s)
	cpu0 := serverCPU(b, s)
	for done := 0; done < n; {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: per, WorkerID: "w", LeaseDuration: time.Minute})
		if err != nil || len(jobs) == 0 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		cs := make([]store.Completion, len(jobs))
		for i, j := range jobs {
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
		}
		if _, err := s.Finish(ctx, cs); err != nil {
			b.Fatal(err)
		}
		done += len(jobs)
	}
	b.StopTimer()
	b.ReportMetric((serverCPU(b, s)-cpu0)*1e6/float64(n), "redis-µs/job")
}

// serverCPU returns the Redis server's CPU seconds so far (system and user, main thread and all).
func serverCPU(b *testing.B, s *Store) float64 {
	b.Helper()
	info, err := s.rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}

// BenchmarkDecodeHanded decodes a handed job as a waiter does on the pickup path (handoff.go).
func BenchmarkDecodeHanded(b *testing.B) {
	fields := []string{"id", uuidv7.New(), "queue", "default", "kind", "bench.noop", "state", "active",
		"attempt", "1", "p", "1", "created", "1795713721534965", "sched", "1795713721534965",
		"started", "1795713721534965", "lease", "1795713724784965", "worker", "host-1234-0123456789ab",
		"token", "676c277c1a03429969cced35", "args", `{"n":1,"at":"2026-11-26T17:00:00.123456789Z"}`,
		"prio", "1", "max", "25"}
	var v []byte
	for _, f := range fields {
		v = strconv.AppendInt(v, int64(len(f)), 10)
		v = append(v, ':')
		v = append(v, f...)
	}
	s := string(v)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeHanded(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClusterClaimFinish claims one job and completes it per op on a local 3-master Redis
// Cluster: plain jobs, and jobs of a rate key whose limit never holds them back (max_active far
// above what runs), which measures what the permits cost a claim there (ratelimit.go: the claim
// stops, takes permits in the key's slot, claims again and confirms; the outcome gives the permit
// back).
func BenchmarkClusterClaimFinish(b *testing.B) {
	rdb := clusterClient(b)
	s := clusterStore(b, rdb)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if err := s.SetRateLimit(ctx, "bench-key", store.RateLimit{MaxActive: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	for _, limited := range []bool{false, true} {
		name, queue := "plain", "plain"
		if limited {
			name, queue = "rate-limited", "limited"
		}
		b.Run(name, func(b *testing.B) {
			n := b.N
			for n > 0 {
				k := min(n, 500)
				batch := make([]*store.InsertParams, k)
				for i := range batch {
					batch[i] = benchJob(queue)
					if limited {
						batch[i].RateKey = "bench-key"
					}
				}
				if _, err := s.Insert(ctx, batch); err != nil {
					b.Fatal(err)
				}
				n -= k
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				jobs, err := s.Claim(ctx, store.ClaimParams{Queue: queue, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
				if err != nil || len(jobs) != 1 {
					b.Fatalf("claim: %d jobs, %v", len(jobs), err)
				}
				j := jobs[0]
				if _, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClusterWorkflowStep runs one two-step workflow per op on a local 3-master Redis Cluster
// (claim and complete the parent, which releases the child; claim and complete the child): both
// steps in one queue, and the child in a queue on another master (a split workflow, relay.go), which
// measures what relaying the parent's outcome through its queue's outbox costs.
func BenchmarkClusterWorkflowStep(b *testing.B) {
	rdb := clusterClient(b)
	s := clusterStore(b, rdb)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	qs := queuesOnEachMaster(b, rdb, s)
	// run claims p's job (each workflow job has a kind of its own) and completes it.
	run := func(b *testing.B, p *store.InsertParams) {
		b.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: p.Queue, Kinds: []string{p.Kind}, Limit: 1, WorkerID: "w",
			LeaseDuration: time.Minute})
		if err != nil || len(jobs) != 1 {
			b.Fatalf("claim of %s: %d jobs, %v", p.ID, len(jobs), err)
		}
		j := jobs[0]
		res, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}})
		if err != nil || !res[0].Applied {
			b.Fatalf("finish: %v", err)
		}
	}
	for _, split := range []bool{false, true} {
		name, childQueue := "one-queue", qs[0]
		if split {
			name, childQueue = "two-queues", qs[1]
		}
		b.Run(name, func(b *testing.B) {
			steps := make([][2]*store.InsertParams, b.N)
			for i := range steps {
				wf := uuidv7.New()
				parent := storetest.WorkflowJob(wf, qs[0])
				child := storetest.WorkflowJob(wf, childQueue, parent)
				if _, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{parent, child}}); err != nil {
					b.Fatal(err)
				}
				steps[i] = [2]*store.InsertParams{parent, child}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, st := range steps {
				run(b, st[0])
				run(b, st[1])
			}
		})
	}
}
