package sqlite_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

type drainArgs struct {
	N int `json:"n"`
}

func (drainArgs) Kind() string { return "bench.drain" }

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClientDrain is the bench's drain scenario in one process: a backlog of b.N zero-work jobs
// (at least 20,000) worked by a pronto client with 100 workers, from the first claim to the last
// outcome written. It reports jobs/s and the process's CPU time per job (cpu-µs/job), which a loaded
// machine disturbs less than the elapsed time.
func BenchmarkClientDrain(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "drain.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[drainArgs]) error {
		done.Add(1)
		return nil
	}))
	inserter, err := pronto.NewClient(st, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 20_000)
	for i := 0; i < n; i += 1000 {
		ps := make([]pronto.InsertManyParams, min(1000, n-i))
		for k := range ps {
			ps[k] = pronto.InsertManyParams{Args: drainArgs{N: i + k}}
		}
		if _, err := inserter.InsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	c, err := pronto.NewClient(st, &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 100}},
		Workers: workers,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0, start := cpuTime(), time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	finished := func() int64 {
		qs, err := st.ListQueues(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var f int64
		for _, q := range qs {
			f += q.Counts[pronto.StateCompleted]
		}
		return f
	}
	for done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	for finished() < int64(n) { // the last outcomes are written after their jobs return
		time.Sleep(time.Millisecond)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	if err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/job")
}
