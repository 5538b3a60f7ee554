//go:build !benchworker

package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/pronto-jobs/pronto/store/sqlite"
)

func init() { register(prontoSQLite{}) }

// ---- pronto on SQLite ----

type prontoSQLite struct{}

func (prontoSQLite) name() string                   { return "pronto-sqlite" }
func (prontoSQLite) shared() bool                   { return false }
func (prontoSQLite) workersFor(_ string, n int) int { return n }

func (prontoSQLite) path(e *env, id string) string { return filepath.Join(e.tmpDir, id+".db") }

func (s prontoSQLite) create(ctx context.Context, e *env, id string) error {
	st, err := sqlite.Open(ctx, s.path(e, id))
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Migrate(ctx)
}

func (s prontoSQLite) drop(_ context.Context, e *env, id string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(s.path(e, id) + suffix)
	}
	return nil
}

func (s prontoSQLite) open(ctx context.Context, e *env, id string) (instance, error) {
	st, err := sqlite.Open(ctx, s.path(e, id))
	if err != nil {
		return nil, err
	}
	inst, err := newProntoInstance(st, nil, countFinished(st))
	if err != nil {
		st.Close()
		return nil, err
	}
	return inst, nil
}
