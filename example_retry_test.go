package pronto_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type ChargeCard struct {
	OrderID string `json:"order_id"`
}

func (ChargeCard) Kind() string { return "billing.charge" }

// A failing attempt is retried after its retry policy's backoff; each failure is kept in the job's
// error history.
func Example_retry() {
	ctx := context.Background()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[ChargeCard]) error {
		if job.Attempt == 1 {
			return errors.New("card processor unavailable")
		}
		return nil
	}))
	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{"billing": {MaxWorkers: 5}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)
	events, unsubscribe := client.Subscribe(pronto.EventFailed, pronto.EventCompleted)
	defer unsubscribe()

	_, err = client.Insert(ctx, ChargeCard{OrderID: "o-42"}, &pronto.InsertOpts{
		Queue:       "billing",
		RetryPolicy: &pronto.RetryPolicy{MaxAttempts: 5, InitialInterval: 20 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	for e := range events {
		fmt.Println(e.Kind, "attempt", e.Job.Attempt)
		if e.Kind == pronto.EventCompleted {
			fmt.Println("errors recorded:", len(e.Job.Errors), "-", e.Job.Errors[0].Message)
			break
		}
	}
	// Output:
	// job.failed attempt 1
	// job.completed attempt 2
	// errors recorded: 1 - card processor unavailable
}
