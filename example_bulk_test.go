package pronto_test

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type IndexDocument struct {
	DocID int `json:"doc_id"`
}

func (IndexDocument) Kind() string { return "search.index" }

// A bulk load inserts its jobs in batches, each atomically: InsertMany returns the stored jobs,
// InsertManyFast only how many it stored, which spares building a row per job when the caller has no
// use for them (on PostgreSQL, a plain batch is then written without reading anything back).
func Example_bulkLoad() {
	ctx := context.Background()
	client, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		panic(err)
	}
	const docs, batchSize = 2500, 1000
	stored := 0
	for first := 0; first < docs; first += batchSize {
		batch := make([]pronto.InsertManyParams, 0, batchSize)
		for id := first; id < min(first+batchSize, docs); id++ {
			batch = append(batch, pronto.InsertManyParams{Args: IndexDocument{DocID: id}})
		}
		n, err := client.InsertManyFast(ctx, batch)
		if err != nil {
			panic(err)
		}
		stored += n
	}
	queues, err := client.QueueList(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("stored:", stored, "waiting:", queues[0].Counts[pronto.StateAvailable])
	// Output:
	// stored: 2500 waiting: 2500
}
