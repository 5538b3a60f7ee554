package pronto_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type PollExport struct {
	ExportID string `json:"export_id"`
}

func (PollExport) Kind() string { return "export.poll" }

// A worker that is not ready yet snoozes: the job goes back to scheduled without spending an attempt.
func Example_snooze() {
	ctx := context.Background()
	finished := make(chan int)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[PollExport]) error {
		if job.Attempt < 3 {
			return pronto.Snooze(10 * time.Millisecond) // not ready; look again shortly
		}
		finished <- job.Attempt
		return nil
	}))
	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 1}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	if _, err := client.Insert(ctx, PollExport{ExportID: "x1"}, &pronto.InsertOpts{MaxAttempts: 1}); err != nil {
		panic(err)
	}
	fmt.Println("finished on run", <-finished, "although MaxAttempts is 1")
	// Output: finished on run 3 although MaxAttempts is 1
}
