package pronto_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type FetchReport struct {
	Day string `json:"day"`
}

func (FetchReport) Kind() string { return "report.fetch" }

type SummariseReport struct{}

func (SummariseReport) Kind() string { return "report.summarise" }

type MailReport struct{}

func (MailReport) Kind() string { return "report.mail" }

// A workflow is a graph of steps: each starts when the steps it comes after have completed, and
// receives their results. Callbacks run when the whole workflow has finished.
func Example_workflow() {
	ctx := context.Background()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[FetchReport]) error {
		return pronto.RecordResult(ctx, map[string]int{"rows": 42})
	}))
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[SummariseReport]) error {
		results, err := pronto.ParentResults(job.JobRow)
		if err != nil {
			return err
		}
		fmt.Println("summarising", string(results[0]))
		return nil
	}))
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[MailReport]) error {
		fmt.Println("mailing the report")
		return nil
	}))
	client, err := pronto.NewClient(memory.New(), &pronto.Config{
		Queues:  map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 5}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	wf := pronto.NewWorkflow("daily-report").
		Add("fetch", FetchReport{Day: "2026-11-23"}, nil).
		Add("summarise", SummariseReport{}, nil, "fetch").
		OnSuccess(pronto.WorkflowJob{Args: MailReport{}})
	res, err := client.WorkflowInsert(ctx, wf)
	if err != nil {
		panic(err)
	}
	// The callback is released when the last step completes; wait for it to finish.
	for {
		cb, err := client.JobGet(ctx, res.Jobs["on_success"].ID)
		if err != nil {
			panic(err)
		}
		if cb.State == pronto.StateCompleted {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	info, err := client.WorkflowGet(ctx, wf.ID())
	if err != nil {
		panic(err)
	}
	fmt.Println("workflow", info.State, "with", info.Counts[pronto.StateCompleted], "of", info.Total, "steps completed")
	// Output:
	// summarising {"rows":42}
	// mailing the report
	// workflow completed with 2 of 2 steps completed
}
