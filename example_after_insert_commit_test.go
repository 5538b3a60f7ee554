package pronto_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

type SendInvoice struct {
	InvoiceID string `json:"invoice_id"`
}

func (SendInvoice) Kind() string { return "invoice.send" }

// Insert middleware that counts inserted jobs, as promexport does: with AfterInsertCommit, a job
// inserted in the application's transaction is counted once that commits, and never if it rolls
// back.
func ExampleAfterInsertCommit() {
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

	counted := make(chan string, 10)
	countInserts := func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
		rows, err := next(ctx, ps)
		pronto.AfterInsertCommit(ctx, func() {
			for _, r := range rows {
				if !r.Duplicate {
					counted <- r.ID
				}
			}
		})
		return rows, err
	}
	client, err := pronto.NewClient(st, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{countInserts}})
	if err != nil {
		panic(err)
	}

	insert := func(invoice string, commit bool) string {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback()
		row, err := client.InsertSQLTx(ctx, tx, SendInvoice{InvoiceID: invoice}, nil)
		if err != nil {
			panic(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				panic(err)
			}
		}
		return row.ID
	}
	insert("inv-1", false) // rolled back
	committed := insert("inv-2", true)

	fmt.Println("committed job counted:", <-counted == committed)
	_ = client.Stop(ctx) // ends the wait for the rolled-back transaction
	fmt.Println("jobs counted after it:", len(counted))
	// Output:
	// committed job counted: true
	// jobs counted after it: 0
}
