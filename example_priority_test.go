package pronto_test

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// reportArgs are the args of the priority example's jobs.
type reportArgs struct{ Customer string }

func (reportArgs) Kind() string { return "report.build" }

// Higher priorities are claimed first; QueueAvailableByPriority shows how the work waiting in a
// queue is spread over them (ojs-priority.md §10.3), as an operator's dashboard would.
func ExampleClient_QueueAvailableByPriority() {
	ctx := context.Background()
	client, err := pronto.NewClient(memory.New(), nil)
	if err != nil {
		panic(err)
	}
	for _, prio := range []int{pronto.PriorityHigh, pronto.PriorityNormal, pronto.PriorityNormal, pronto.PriorityLow} {
		if _, err := client.Insert(ctx, reportArgs{Customer: "acme"}, &pronto.InsertOpts{Queue: "reports", Priority: prio}); err != nil {
			panic(err)
		}
	}
	counts, err := client.QueueAvailableByPriority(ctx, "reports")
	if err != nil {
		panic(err)
	}
	fmt.Println(counts[pronto.PriorityHigh], counts[pronto.PriorityNormal], counts[pronto.PriorityLow])
	// Output:
	// 1 2 1
}
