package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// Open a store on a file, create its schema, and insert a job in the same transaction as the
// application's own write: the job exists, and this process's producers are woken, only if the
// transaction commits.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "pronto-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, filepath.Join(dir, "pronto.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	woken := 0
	unsubscribe := st.Notifier().Subscribe(func(n store.Notification) {
		if n.Kind == store.NotifyInsert {
			woken++
		}
	})
	defer unsubscribe()

	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)`); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (total) VALUES (4200)`); err != nil {
		log.Fatal(err)
	}
	jobs, err := st.InsertSQLTx(ctx, tx, []*store.InsertParams{{
		ID:          "0190d0e2-0000-7000-8000-000000000001",
		Kind:        "email.receipt",
		Queue:       "default",
		Args:        json.RawMessage(`[{"order":1}]`),
		MaxAttempts: 25,
		State:       store.StateAvailable,
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("woken before commit:", woken)
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("woken after commit:", woken)

	j, err := st.GetJob(ctx, jobs[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.Kind, j.State)
	// Output:
	// woken before commit: 0
	// woken after commit: 1
	// email.receipt available
}
