package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestReadOnlyErrorCondition: a WriteProbe's read-only answer, wrapped as callers wrap errors, is
// named read_only and is unavailable (503 with Retry-After, never a refusal given up on), for any
// store, including one whose own classifier does not know it; its text keeps the backend's words.
func TestReadOnlyErrorCondition(t *testing.T) {
	err := fmt.Errorf("pronto: ready: %w", store.ReadOnlyError("server is a %s", "replica"))
	require := func(ok bool, msg string) {
		t.Helper()
		if !ok {
			t.Fatalf("%s (err %q)", msg, err)
		}
	}
	require(errors.Is(err, store.ErrReadOnly), "errors.Is ErrReadOnly")
	require(err.Error() == "pronto: ready: the store takes no writes: server is a replica", "text")
	for _, s := range []store.Store{nil, memory.New(), classifierStore{memory.New()}} {
		require(store.ConditionOf(s, err) == store.ConditionReadOnly, fmt.Sprintf("ConditionOf(%T) = %q", s, store.ConditionOf(s, err)))
		require(store.IsUnavailable(s, err), fmt.Sprintf("IsUnavailable(%T)", s))
		require(!store.IsRefused(s, err), fmt.Sprintf("IsRefused(%T)", s))
	}
	require(store.ConditionReadOnly.Reachable(), "read_only is reachable")
}

// classifierStore classifies every error as its own "unavailable", as a store's client library
// might: ErrReadOnly is still read_only.
type classifierStore struct{ store.Store }

func (classifierStore) Condition(error) store.Condition { return store.ConditionUnavailable }
func (classifierStore) Unavailable(error) bool          { return true }

// TestProbeWritable: a store without a WriteProbe (memory) is taken as writable; one with it is
// asked.
func TestProbeWritable(t *testing.T) {
	ctx := context.Background()
	if err := store.ProbeWritable(ctx, memory.New()); err != nil {
		t.Fatalf("memory: %v", err)
	}
	if err := store.ProbeWritable(ctx, nil); err != nil {
		t.Fatalf("nil: %v", err)
	}
	want := store.ReadOnlyError("fenced")
	if err := store.ProbeWritable(ctx, probeStore{memory.New(), want}); err != want {
		t.Fatalf("probe: got %v, want %v", err, want)
	}
}

type probeStore struct {
	store.Store
	err error
}

func (p probeStore) ProbeWritable(context.Context) error { return p.err }
