package memory_test

import (
	"encoding/json"
	"testing"
	"time"

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
	jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Second})
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

// TestClaimOrderByLongID: ids are any strings; jobs equal in priority and due time are claimed in id
// order even when their ids share a long prefix, or one is a prefix of another.
func TestClaimOrderByLongID(t *testing.T) {
	s := memory.New()
	prefix := "tenant-0000000000000000000000000000-job-"
	want := []string{prefix, prefix + "\x00", prefix + "a", prefix + "b", prefix + "ba", "u"}
	due := time.Now().Add(-time.Second)
	var ps []*store.InsertParams
	for _, i := range []int{4, 1, 5, 0, 3, 2} {
		ps = append(ps, &store.InsertParams{ID: want[i], Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, ScheduledAt: due})
	}
	_, err := s.Insert(t.Context(), ps)
	require.NoError(t, err)
	var got []string
	for range want {
		jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		got = append(got, jobs[0].ID)
	}
	require.Equal(t, want, got)
}

// TestReturnedJSONIsCapped: appending to one JSON field of a returned job cannot overwrite another.
func TestReturnedJSONIsCapped(t *testing.T) {
	s := memory.New()
	p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[1]`),
		Meta: json.RawMessage(`{"a":1}`), RetryPolicy: json.RawMessage(`{"max_attempts":2}`),
		State: store.StateAvailable, MaxAttempts: 1}
	_, err := s.Insert(t.Context(), []*store.InsertParams{p})
	require.NoError(t, err)
	j, err := s.GetJob(t.Context(), p.ID)
	require.NoError(t, err)
	_ = append(j.Args, "XXXXXXXXXX"...)
	_ = append(j.Meta, "XXXXXXXXXX"...)
	require.JSONEq(t, `{"a":1}`, string(j.Meta))
	require.JSONEq(t, `{"max_attempts":2}`, string(j.RetryPolicy))
}
