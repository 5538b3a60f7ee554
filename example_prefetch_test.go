package pronto_test

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type ResizeThumb struct {
	N int `json:"n"`
}

func (ResizeThumb) Kind() string { return "thumb.resize" }

// One worker with a fixed Prefetch: the client claims up to 16 jobs ahead of its free worker, so
// short jobs run back to back instead of each waiting for a claim; they still run one at a time, in
// claim order. The default (Prefetch 0) does this by itself through a backlog of jobs shorter than a
// claim's round trip; a fixed count holds ahead whatever the jobs, and NoPrefetch never does.
func Example_prefetch() {
	ctx := context.Background()
	ran := make(chan int, 10)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[ResizeThumb]) error {
		ran <- job.Args.N
		return nil
	}))
	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 1, Prefetch: 16}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	batch := make([]pronto.InsertManyParams, 5)
	for i := range batch {
		batch[i] = pronto.InsertManyParams{Args: ResizeThumb{N: i}}
	}
	if _, err := client.InsertMany(ctx, batch); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	for range batch {
		fmt.Print(<-ran, " ")
	}
	fmt.Println()
	// Output: 0 1 2 3 4
}
