package pronto_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

type ChargeOrder struct {
	OrderID string `json:"order_id"`
}

func (ChargeOrder) Kind() string { return "order.charge" }

// Atomic processing: the worker writes its effect and completes its job in one transaction, so a
// crash can never leave the charge written and the job to run (and charge) again.
func Example_completeTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "pronto-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "jobs.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	db := st.DB() // the application's tables live in the same file
	if _, err := db.Exec(`CREATE TABLE charges (order_id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}

	done := make(chan string)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[ChargeOrder]) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES (?)`, job.Args.OrderID); err != nil {
			return err
		}
		if err := pronto.CompleteSQLTx(ctx, tx); err != nil {
			return err // this run lost the job: the charge rolls back with it
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		done <- job.ID
		return nil
	}))
	client, err := pronto.NewClient(st, &pronto.Config{
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

	row, err := client.Insert(ctx, ChargeOrder{OrderID: "o-17"}, nil)
	if err != nil {
		panic(err)
	}
	<-done
	job, err := client.JobGet(ctx, row.ID)
	if err != nil {
		panic(err)
	}
	var charges int
	if err := db.QueryRow(`SELECT count(*) FROM charges`).Scan(&charges); err != nil {
		panic(err)
	}
	fmt.Println(job.State, "with", charges, "charge")
	// Output: completed with 1 charge
}
