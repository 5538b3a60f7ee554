package pronto_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// SendWelcome is a job's args: its Kind names the job type, and the struct is stored as JSON.
type SendWelcome struct {
	Email string `json:"email"`
}

func (SendWelcome) Kind() string { return "email.welcome" }

// Define a worker, start a client, insert a job and wait for it to complete.
func Example_insertAndWork() {
	ctx := context.Background()
	done := make(chan struct{})

	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[SendWelcome]) error {
		fmt.Println("sending welcome to", job.Args.Email)
		close(done)
		return nil
	}))

	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	job, err := client.Insert(ctx, SendWelcome{Email: "ada@example.com"}, nil)
	if err != nil {
		panic(err)
	}
	<-done
	for {
		j, _ := client.JobGet(ctx, job.ID)
		if j.State == pronto.StateCompleted {
			fmt.Println("state:", j.State, "attempt:", j.Attempt)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Output:
	// sending welcome to ada@example.com
	// state: completed attempt: 1
}
