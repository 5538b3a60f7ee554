package pronto_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkWorkflowFanIn measures working a batch of n members with an on_complete callback, whose
// pending callback every member's outcome decides: claims and finishes of 100 at a time, per store.
// Deciding it by reading every parent made the whole batch cost n² (PostgreSQL, 4,000 members:
// 20 s before, 1.8 s after, in the twenty-eighth session).
func BenchmarkWorkflowFanIn(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		for _, kind := range allStores {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
				ts := newTestStore(b, kind)
				ctx := context.Background()
				c, err := pronto.NewClient(ts.Store, nil)
				if err != nil {
					b.Fatal(err)
				}
				for range b.N {
					b.StopTimer()
					jobs := make([]pronto.WorkflowJob, n)
					for i := range jobs {
						jobs[i] = pronto.WorkflowJob{Args: echoArgs{N: i}, Opts: &pronto.InsertOpts{Queue: "fanin"}}
					}
					w := pronto.NewBatch("fanin", jobs...).OnComplete(pronto.WorkflowJob{Args: echoArgs{N: -1}, Opts: &pronto.InsertOpts{Queue: "fanin-done"}})
					if _, err := c.WorkflowInsert(ctx, w); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					for done := 0; done < n; {
						got, err := ts.Store.Claim(ctx, store.ClaimParams{Queue: "fanin", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute})
						if err != nil {
							b.Fatal(err)
						}
						cs := make([]store.Completion, len(got))
						for i, j := range got {
							cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
						}
						if _, err := ts.Store.Finish(ctx, cs); err != nil {
							b.Fatal(err)
						}
						done += len(got)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/member")
			})
		}
	}
}
