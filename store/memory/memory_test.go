package memory_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s := memory.New()
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			return s
		},
		Reopen: func(t *testing.T, s store.Store) store.Store { return s },
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, storetest.BenchHarness{
		New: func(b *testing.B) store.Store { return memory.New() },
	})
}

// TestInsertRefusesBadInput covers what the memory store adds to the contract: a job it cannot
// place is refused with a clear error, and nothing of its batch is stored.
func TestInsertRefusesBadInput(t *testing.T) {
	s := memory.New()
	good := func() *store.InsertParams {
		return &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1}
	}
	for name, mutate := range map[string]func(*store.InsertParams){
		"active":    func(p *store.InsertParams) { p.State = store.StateActive },
		"completed": func(p *store.InsertParams) { p.State = store.StateCompleted },
		"retryable": func(p *store.InsertParams) { p.State = store.StateRetryable },
		"no state":  func(p *store.InsertParams) { p.State = "" },
		"bogus":     func(p *store.InsertParams) { p.State = "running" },
		"no id":     func(p *store.InsertParams) { p.ID = "" },
		"no kind":   func(p *store.InsertParams) { p.Kind = "" },
		"no queue":  func(p *store.InsertParams) { p.Queue = "" },
	} {
		t.Run(name, func(t *testing.T) {
			first, bad := good(), good()
			mutate(bad)
			_, err := s.Insert(t.Context(), []*store.InsertParams{first, bad})
			require.Error(t, err)
			require.NotErrorIs(t, err, store.ErrDuplicate)
			_, err = s.GetJob(t.Context(), first.ID)
			require.ErrorIs(t, err, store.ErrNotFound, "nothing of a refused batch is stored")
		})
	}
	_, err := s.Insert(t.Context(), []*store.InsertParams{nil})
	require.Error(t, err)
	qs, err := s.ListQueues(t.Context())
	require.NoError(t, err)
	require.Empty(t, qs)
}

// TestFinishRefusesBadState: a completion to a state an attempt cannot end in fails the whole batch.
func TestFinishRefusesBadState(t *testing.T) {
	s := memory.New()
	p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1}
	_, err := s.Insert(t.Context(), []*store.InsertParams{p})
	require.NoError(t, err)
	jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: 1e9})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	for _, st := range []store.State{store.StatePending, store.StateActive, "bogus"} {
		_, err := s.Finish(t.Context(), []store.Completion{
			{ID: p.ID, Attempt: 1, State: store.StateCompleted}, {ID: p.ID, Attempt: 1, State: st},
		})
		require.Error(t, err, "finish to %q", st)
		j, err := s.GetJob(t.Context(), p.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateActive, j.State, "nothing of a refused batch is applied")
	}
}
