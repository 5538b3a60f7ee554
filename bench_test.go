package pronto_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench.noop" }

// BenchmarkDrain measures how fast a client with 100 workers drains a backlog of zero-work jobs
// (claim, run, batched completion), per store. jobs/s is the figure to watch.
func BenchmarkDrain(b *testing.B) {
	for _, kind := range allStores {
		b.Run(string(kind), func(b *testing.B) { benchDrain(b, kind) })
	}
}

// BenchmarkDrainOneWorker drains a backlog of zero-work jobs with one worker, without and with
// Prefetch (QueueConfig.Prefetch): without, each job waits for its own claim's round trip; with,
// the claims run ahead of the worker.
func BenchmarkDrainOneWorker(b *testing.B) {
	for _, kind := range allStores {
		for _, prefetch := range []int{0, 64} {
			b.Run(fmt.Sprintf("%s/prefetch=%d", kind, prefetch), func(b *testing.B) {
				benchDrainWith(b, kind, pronto.QueueConfig{MaxWorkers: 1, Prefetch: prefetch})
			})
		}
	}
}

// BenchmarkDrainTenant is BenchmarkDrain's PostgreSQL drain of jobs without a tenant and of jobs
// of one tenant (fair claims: tenant_flood's tenant A alone), with the queue's default prefetch and
// without prefetch, so that what a tenant's jobs cost is seen apart from what the prefetch gives.
func BenchmarkDrainTenant(b *testing.B) {
	for _, tenant := range []string{"", "a"} {
		for _, prefetch := range []int{0, pronto.NoPrefetch} {
			name := fmt.Sprintf("tenant=%q/prefetch=%d", tenant, prefetch)
			b.Run(name, func(b *testing.B) {
				var opts *pronto.InsertOpts
				if tenant != "" {
					opts = &pronto.InsertOpts{Tenant: tenant}
				}
				benchDrainOpts(b, kindPostgres, pronto.QueueConfig{MaxWorkers: 100, Prefetch: prefetch}, opts)
			})
		}
	}
}

// BenchmarkDrainRateLimited is BenchmarkDrain's drain, per store, of jobs of one rate key: every
// claim goes through the store's limited claim (PostgreSQL: claim_limited_held), with the queue's
// default prefetch and without. With max=1000 the key's limit always has room for the 100 workers;
// with max=50 it is at its limit most of the time, and its due backlog waits beside the claims.
func BenchmarkDrainRateLimited(b *testing.B) {
	for _, kind := range allStores {
		for _, maxActive := range []int{1000, 50} {
			for _, prefetch := range []int{0, pronto.NoPrefetch} {
				b.Run(fmt.Sprintf("%s/max=%d/prefetch=%d", kind, maxActive, prefetch), func(b *testing.B) {
					opts := &pronto.InsertOpts{RateKey: "k", RateLimit: &pronto.RateLimit{MaxActive: maxActive}}
					benchDrainOpts(b, kind, pronto.QueueConfig{MaxWorkers: 100, Prefetch: prefetch}, opts)
				})
			}
		}
	}
}

func benchDrain(b *testing.B, kind storeKind) {
	benchDrainWith(b, kind, pronto.QueueConfig{MaxWorkers: 100})
}

func benchDrainWith(b *testing.B, kind storeKind, queue pronto.QueueConfig) {
	benchDrainOpts(b, kind, queue, nil)
}

// BenchmarkDrainTenantLimited is BenchmarkDrain's drain, per store, of one tenant's jobs under a
// tenant limit of 50 running jobs (TenantSetLimit) for 100 workers: the tenant is at its limit most
// of the time, as BenchmarkDrainRateLimited's key at max=50.
func BenchmarkDrainTenantLimited(b *testing.B) {
	for _, kind := range allStores {
		b.Run(string(kind), func(b *testing.B) {
			benchDrainSetup(b, kind, pronto.QueueConfig{MaxWorkers: 100}, &pronto.InsertOpts{Tenant: "a"},
				func(c *pronto.Client) error {
					return c.TenantSetLimit(context.Background(), "a", pronto.RateLimit{MaxActive: 50})
				})
		})
	}
}

// BenchmarkDrainRateWindow is BenchmarkDrain's drain, per store, of jobs under a rate window of
// 500 starts per 100 ms (5,000 jobs/s at most), for 100 workers: a rate key's limit, and a tenant's
// (TenantSetLimit). How close each comes to the window's rate is how soon a claim follows a window's
// end.
func BenchmarkDrainRateWindow(b *testing.B) {
	window := pronto.RateLimit{Rate: 500, Period: 100 * time.Millisecond}
	for _, kind := range allStores {
		b.Run(string(kind)+"/key", func(b *testing.B) {
			benchDrainOpts(b, kind, pronto.QueueConfig{MaxWorkers: 100}, &pronto.InsertOpts{RateKey: "k", RateLimit: &window})
		})
		b.Run(string(kind)+"/tenant", func(b *testing.B) {
			benchDrainSetup(b, kind, pronto.QueueConfig{MaxWorkers: 100}, &pronto.InsertOpts{Tenant: "a"},
				func(c *pronto.Client) error { return c.TenantSetLimit(context.Background(), "a", window) })
		})
	}
}

// benchDrainOpts drains a backlog of max(b.N, 1000) zero-work jobs inserted with opts (nil for
// none) through the default queue, configured as queue, and reports jobs/s.
func benchDrainOpts(b *testing.B, kind storeKind, queue pronto.QueueConfig, opts *pronto.InsertOpts) {
	benchDrainSetup(b, kind, queue, opts, nil)
}

// benchDrainSetup is benchDrainOpts with setup (nil for none) run first with the inserting client.
func benchDrainSetup(b *testing.B, kind storeKind, queue pronto.QueueConfig, opts *pronto.InsertOpts, setup func(*pronto.Client) error) {
	ctx := context.Background()
	ts := newTestStore(b, kind)
	var done atomic.Int64
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error {
		done.Add(1)
		return nil
	}))
	inserter, err := pronto.NewClient(ts.Store, nil)
	if err != nil {
		b.Fatal(err)
	}
	if setup != nil {
		if err := setup(inserter); err != nil {
			b.Fatal(err)
		}
	}
	const batch = 1000
	n := max(b.N, batch)
	for i := 0; i < n; i += batch {
		ps := make([]pronto.InsertManyParams, min(batch, n-i))
		for k := range ps {
			ps[k] = pronto.InsertManyParams{Args: noopArgs{N: i + k}, Opts: opts}
		}
		if _, err := inserter.InsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	c, err := pronto.NewClient(ts.Store, &pronto.Config{Queues: map[string]pronto.QueueConfig{pronto.DefaultQueue: queue}, Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	_ = c.Stop(ctx)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
}

// BenchmarkInsert measures single inserts and InsertMany batches per store.
func BenchmarkInsert(b *testing.B) {
	for _, kind := range allStores {
		for _, size := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, size), func(b *testing.B) {
				ctx := context.Background()
				ts := newTestStore(b, kind)
				c, err := pronto.NewClient(ts.Store, nil)
				if err != nil {
					b.Fatal(err)
				}
				ps := make([]pronto.InsertManyParams, size)
				for k := range ps {
					ps[k] = pronto.InsertManyParams{Args: noopArgs{N: k}}
				}
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if size == 1 {
						_, err = c.Insert(ctx, noopArgs{N: i}, nil)
					} else {
						_, err = c.InsertMany(ctx, ps)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkInsertParallel measures single-job Inserts made by 100 goroutines at once through one
// client, per store, with concurrent inserts merged into batched writes (coalesced, the default)
// and with every insert written on its own (InsertBatchSize 1). jobs/s is the figure to watch.
func BenchmarkInsertParallel(b *testing.B) {
	for _, kind := range allStores {
		for _, mode := range []struct {
			name string
			size int
		}{{"coalesced", 0}, {"alone", 1}} {
			b.Run(fmt.Sprintf("%s/%s", kind, mode.name), func(b *testing.B) {
				ctx := context.Background()
				ts := newTestStore(b, kind)
				c, err := pronto.NewClient(ts.Store, &pronto.Config{InsertBatchSize: mode.size})
				if err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(max(1, 100/runtime.GOMAXPROCS(0)))
				var n atomic.Int64
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := c.Insert(ctx, noopArgs{N: int(n.Add(1))}, nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkInsertSequential measures single-job Inserts made one after another by one goroutine,
// per store, with insert coalescing (the default) and without (InsertBatchSize 1): a lone caller
// must not be slower for it.
func BenchmarkInsertSequential(b *testing.B) {
	for _, kind := range allStores {
		for _, mode := range []struct {
			name string
			size int
		}{{"coalesced", 0}, {"alone", 1}} {
			b.Run(fmt.Sprintf("%s/%s", kind, mode.name), func(b *testing.B) {
				ctx := context.Background()
				// On Redis, bullmq-bench's queue-add: one producer, single adds.
				c, err := pronto.NewClient(newTestStore(b, kind).Store, &pronto.Config{InsertBatchSize: mode.size})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if _, err := c.Insert(ctx, noopArgs{N: i}, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkRemoteFetchParallel measures remote fetches of one job, each then acked, made by 100
// goroutines at once through one client (an OJS server's load), per store, with concurrent fetches
// of the queue sharing claims (the default) and with every fetch claiming alone (FetchBatchSize 1).
func BenchmarkRemoteFetchParallel(b *testing.B) {
	for _, kind := range []storeKind{kindSQLite, kindPostgres} {
		for _, mode := range []struct {
			name string
			size int
		}{{"shared", 0}, {"alone", 1}} {
			b.Run(fmt.Sprintf("%s/%s", kind, mode.name), func(b *testing.B) {
				ctx := context.Background()
				ts := newTestStore(b, kind)
				c, err := pronto.NewClient(ts.Store, &pronto.Config{FetchBatchSize: mode.size})
				if err != nil {
					b.Fatal(err)
				}
				for left := b.N + 100; left > 0; left -= 1000 {
					batch := make([]pronto.InsertManyParams, min(left, 1000))
					for i := range batch {
						batch[i] = pronto.InsertManyParams{Args: noopArgs{N: i}}
					}
					if _, err := c.InsertMany(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.SetParallelism(max(1, 100/runtime.GOMAXPROCS(0)))
				var worker atomic.Int64
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					w := fmt.Sprintf("w%d", worker.Add(1))
					for pb.Next() {
						jobs, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{pronto.DefaultQueue},
							WorkerID: w, Lease: time.Minute})
						if err != nil || len(jobs) != 1 {
							b.Errorf("fetch: %d jobs, %v", len(jobs), err)
							return
						}
						if _, err := c.RemoteAck(ctx, pronto.RemoteAckParams{ID: jobs[0].ID, WorkerID: w, Job: jobs[0]}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkPickupRedis20Hz measures pickup on the Redis store in one process (a lower bound of the
// bench's notify_latency, whose workers run in other processes): an idle client gets one job every
// 50 ms, timed from just before Insert to its worker's start; it reports p50-ms and p95-ms.
// -benchtime sets the number of jobs (200x: ten seconds).
func BenchmarkPickupRedis20Hz(b *testing.B) {
	ctx := context.Background()
	started := make(chan time.Time, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error {
		started <- time.Now()
		return nil
	}))
	c, err := pronto.NewClient(newTestStore(b, kindRedis).Store, &pronto.Config{Queues: defaultQueue(10), Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		<-tick.C
		t0 := time.Now()
		if _, err := c.Insert(ctx, noopArgs{N: i}, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-started).Sub(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.95), "p95-ms")
}
