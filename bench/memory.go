package main

import (
	"context"

	"github.com/pronto-jobs/pronto/store/memory"
)

// ---- pronto on the in-memory store (one process only) ----

type prontoMemory struct{}

func (prontoMemory) name() string                               { return "pronto-memory" }
func (prontoMemory) shared() bool                               { return false }
func (prontoMemory) workersFor(_ string, n int) int             { return n }
func (prontoMemory) create(context.Context, *env, string) error { return nil }
func (prontoMemory) drop(context.Context, *env, string) error   { return nil }

func (prontoMemory) open(ctx context.Context, _ *env, _ string) (instance, error) {
	st := memory.New()
	var inst *prontoInstance
	inst, err := newProntoInstance(st, nil, func(ctx context.Context) (int64, error) {
		return 0, errUnsupportedCount
	})
	if err != nil {
		return nil, err
	}
	return inst, nil
}
