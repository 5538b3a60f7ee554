package pronto_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// A queue whose failures must be kept longer than the others' gets a dead letter retention of its
// own (ojs-dead-letter.md 5.3). It is kept in the store, so whichever client leads the cleanup
// applies it; the other queues share Config.DiscardedRetention and DiscardedMaxCount.
func ExampleClient_DeadLetterRetentionsSet() {
	ctx := context.Background()
	client, err := pronto.NewClient(memory.New(), &pronto.Config{DiscardedMaxCount: 1000})
	if err != nil {
		panic(err)
	}
	err = client.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{
		"billing": {MaxAge: 365 * 24 * time.Hour, MaxCount: 50000},
	})
	if err != nil {
		panic(err)
	}
	retentions, err := client.DeadLetterRetentions(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(retentions["billing"].MaxAge, retentions["billing"].MaxCount)

	// A retention needs a bound: the dead letter queue never grows without one.
	err = client.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{"mail": {}})
	fmt.Println(err != nil)
	// Output:
	// 8760h0m0s 50000
	// true
}

// A queue whose completed jobs must stay readable longer than the others' (for a month, say, for
// reconciliation) gets a retention of its own (ojs-admin-api.md 6.6). Zero follows the client's
// CompletedRetention or CancelledRetention.
func ExampleClient_QueueRetentionSet() {
	ctx := context.Background()
	client, err := pronto.NewClient(memory.New(), &pronto.Config{CompletedRetention: 24 * time.Hour})
	if err != nil {
		panic(err)
	}
	if err := client.QueueRetentionSet(ctx, "payments", pronto.QueueRetention{Completed: 30 * 24 * time.Hour}); err != nil {
		panic(err)
	}
	retentions, err := client.QueueRetentions(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(retentions["payments"].Completed, retentions["payments"].Cancelled)

	// Both zero: the queue follows the client's retention again.
	if err := client.QueueRetentionSet(ctx, "payments", pronto.QueueRetention{}); err != nil {
		panic(err)
	}
	retentions, _ = client.QueueRetentions(ctx)
	fmt.Println(len(retentions))
	// Output:
	// 720h0m0s 0s
	// 0
}
