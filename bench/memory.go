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
	return newProntoInstance(st, nil, countFinished(st))
}
