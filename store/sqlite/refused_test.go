package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

// The completer gives an outcome up only when the store refuses its data: SQLite's errors for the
// data (a constraint) are refusals, its errors of the moment (a full disk, a lock) are not.
func TestRefusedTellsDataFromConditions(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.w.ExecContext(ctx, `CREATE TABLE refused_probe (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	_, constraint := st.w.ExecContext(ctx, `INSERT INTO refused_probe (id, v) VALUES (1, NULL)`)
	if constraint == nil {
		t.Fatal("expected a NOT NULL constraint error")
	}
	if !store.IsRefused(st, constraint) {
		t.Fatalf("a constraint error is the data's fault: %v", constraint)
	}
	_, syntax := st.w.ExecContext(ctx, `SELECT * FROM no_such_table_here`)
	if syntax == nil {
		t.Fatal("expected an error")
	}
	if store.IsRefused(st, syntax) {
		t.Fatalf("a missing table (a migration under way) may pass when tried again: %v", syntax)
	}
	if !store.IsRefused(st, errors.New("not SQLite's")) {
		t.Fatal("an error that is not SQLite's cannot be told apart and is refused")
	}
}
