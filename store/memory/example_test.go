package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// The memory store needs no database and no migration; everything it holds is gone when the process
// exits. Applications normally hand it to pronto.NewClient; here it is driven directly.
func Example() {
	ctx := context.Background()
	s := memory.New()
	defer s.Close()

	_, err := s.Insert(ctx, []*store.InsertParams{{
		ID:          uuidv7.New(),
		Kind:        "email.send",
		Queue:       "default",
		Args:        json.RawMessage(`[{"to":"ada@example.com"}]`),
		State:       store.StateAvailable,
		MaxAttempts: 3,
	}})
	if err != nil {
		panic(err)
	}

	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "default", Limit: 10, WorkerID: "worker-1", LeaseDuration: time.Minute})
	if err != nil {
		panic(err)
	}
	for _, j := range jobs {
		fmt.Println("claimed", j.Kind, "attempt", j.Attempt, string(j.Args))
		if _, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}}); err != nil {
			panic(err)
		}
	}

	queues, err := s.ListQueues(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(queues[0].Name, "completed:", queues[0].Counts[store.StateCompleted])
	// Output:
	// claimed email.send attempt 1 [{"to":"ada@example.com"}]
	// default completed: 1
}
