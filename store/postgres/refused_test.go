package postgres_test

import (
	"context"
	"testing"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// TestRefusedOnlyForTheRequestsData: of the errors a real server gives, only those the statement's
// data causes are refusals (store.IsRefused), which the completer may give up on; a lock held past
// lock_timeout, a statement past statement_timeout and a read-only transaction are the server's
// condition (store.IsUnavailable) and may pass when tried again.
func TestRefusedOnlyForTheRequestsData(t *testing.T) {
	ctx := context.Background()
	pool := testdb.NewPool(t, 4)
	s, err := postgres.New(pool, postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "LOCK TABLE "+s.Schema()+".jobs IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name        string
		setting     string
		stmt        string
		refused     bool
		unavailable bool
	}{
		{"numeric overflow", "", "SELECT 100000::int2", true, false},
		{"invalid text", "", "SELECT 'x'::int", true, false},
		{"lock timeout", "SET LOCAL lock_timeout = '50ms'", "SELECT count(*) FROM " + s.Schema() + ".jobs", false, true},
		{"statement timeout", "SET LOCAL statement_timeout = '50ms'", "SELECT pg_sleep(5)", false, true},
		{"read-only", "SET TRANSACTION READ ONLY", "CREATE TEMP TABLE refused_ro (n int)", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if c.setting != "" {
				if _, err := tx.Exec(ctx, c.setting); err != nil {
					t.Fatal(err)
				}
			}
			_, err = tx.Exec(ctx, c.stmt)
			if err == nil {
				t.Fatal("the statement did not fail")
			}
			if got := store.IsRefused(s, err); got != c.refused {
				t.Errorf("IsRefused(%v) = %v, want %v", err, got, c.refused)
			}
			if got := store.IsUnavailable(s, err); got != c.unavailable {
				t.Errorf("IsUnavailable(%v) = %v, want %v", err, got, c.unavailable)
			}
		})
	}
}
