package postgres

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkSmallInsert compares the two ways a small batch of plain jobs can be written: one
// INSERT per job pipelined in one round trip (insertBatch) and one INSERT of arrays
// (insertArrays). Eight goroutines insert at once, so that the database, not the round trip,
// bounds the rate, as when the HTTP server merges many clients' enqueues; it reports jobs/s.
func BenchmarkSmallInsert(b *testing.B) {
	ctx := context.Background()
	s := setup(b)
	paths := map[string]func(context.Context, batchSender, []insertRow, *txBounds) ([]*store.Job, error){
		"pipeline": s.insertBatch,
		"arrays":   s.insertArrays,
	}
	for _, size := range []int{1, 2, 4, 8, 16} {
		for _, path := range []string{"pipeline", "arrays"} {
			b.Run(path+"/"+strconv.Itoa(size), func(b *testing.B) {
				const goroutines = 8
				var wg sync.WaitGroup
				start := time.Now()
				per := max(b.N/goroutines, 1)
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range per {
							ps := make([]*store.InsertParams, size)
							for k := range ps {
								ps[k] = params("small")
							}
							rows, _, err := prepareInsert(ps, false)
							if err != nil {
								b.Error(err)
								return
							}
							if _, err := paths[path](ctx, s.pool, rows, nil); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(per*goroutines*size)/time.Since(start).Seconds(), "jobs/s")
			})
		}
	}
}
