//go:build !benchworker

package main

import (
	"context"

	"github.com/pronto-jobs/pronto/store/memory"
)

func init() { register(prontoMemory{}) }

// ---- pronto on the in-memory store (one process only) ----

type prontoMemory struct{}

func (prontoMemory) name() string                               { return "pronto-memory" }
func (prontoMemory) shared() bool                               { return false }
func (prontoMemory) workersFor(_ string, n int) int             { return n }
func (prontoMemory) create(context.Context, *env, string) error { return nil }
func (prontoMemory) drop(context.Context, *env, string) error   { return nil }

// open runs the store at its defaults, so it keeps memory.DefaultMaxFinished finished jobs and drops
// older ones: finished jobs are counted as those it dropped plus those it keeps, read in that order so
// that a job dropped between the two readings is missed rather than counted twice.
func (prontoMemory) open(ctx context.Context, _ *env, _ string) (instance, error) {
	st := memory.New()
	kept := countFinished(st)
	return newProntoInstance(st, nil, func(ctx context.Context) (int64, error) {
		dropped := st.DroppedFinished()
		n, err := kept(ctx)
		return dropped + n, err
	})
}
