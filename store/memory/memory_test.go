package memory_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestDeepChainCascades: a cancel at the head of a very long chain cancels every step in one call,
// without growing the stack per step.
func TestDeepChainCascades(t *testing.T) {
	const steps = 20_000
	s := memory.New(memory.WithMaxFinished(0)) // keep every cancelled step, to count them
	wf := uuidv7.New()
	ps := make([]*store.InsertParams, steps)
	for i := range ps {
		ps[i] = &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, WorkflowID: wf}
		if i > 0 {
			ps[i].State = store.StatePending
			ps[i].ParentIDs = []string{ps[i-1].ID}
		}
	}
	_, _, err := s.InsertWorkflow(t.Context(), store.WorkflowParams{ID: wf, Type: "chain", Jobs: ps})
	require.NoError(t, err)
	_, err = s.CancelJob(t.Context(), ps[0].ID)
	require.NoError(t, err)
	w, err := s.GetWorkflow(t.Context(), wf)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowFailed, w.State)
	require.Equal(t, steps, w.Counts[store.StateCancelled])
}

// TestFeaturesRefuseBadInput: malformed workflows, limits and unique fields are refused with
// store.ErrInvalidParams, never a panic, and store nothing.
func TestFeaturesRefuseBadInput(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	wf := uuidv7.New()
	good := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1, WorkflowID: wf}
	for name, jobs := range map[string][]*store.InsertParams{
		"nil job":   {good, nil},
		"no kind":   {good, {ID: uuidv7.New(), Queue: "q", State: store.StateAvailable, WorkflowID: wf}},
		"bad state": {good, {ID: uuidv7.New(), Kind: "k", Queue: "q", State: store.StateActive, WorkflowID: wf}},
		"limit, no key": {good, {ID: uuidv7.New(), Kind: "k", Queue: "q", State: store.StateAvailable, WorkflowID: wf,
			RateLimit: &store.RateLimit{MaxActive: 1}}},
	} {
		_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: jobs})
		require.ErrorIs(t, err, store.ErrInvalidParams, name)
		_, err = s.GetJob(ctx, good.ID)
		require.ErrorIs(t, err, store.ErrNotFound, name)
	}

	for name, l := range map[string]store.RateLimit{
		"negative max active": {MaxActive: -1},
		"negative rate":       {Rate: -1, Period: time.Second},
		"unknown action":      {MaxActive: 1, OnLimit: "explode"},
	} {
		require.ErrorIs(t, s.SetRateLimit(ctx, "k", l), store.ErrInvalidParams, name)
		p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, RateKey: "k", RateLimit: &l}
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.ErrorIs(t, err, store.ErrInvalidParams, name)
	}
	require.ErrorIs(t, s.SetRateLimit(ctx, "", store.RateLimit{MaxActive: 1}), store.ErrInvalidParams)
	_, err := s.GetRateLimit(ctx, "k")
	require.ErrorIs(t, err, store.ErrNotFound, "no refused limit is stored")

	p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1, UniqueKey: "u", UniqueStates: []store.State{"bogus"}}
	_, err = s.Insert(ctx, []*store.InsertParams{p})
	require.ErrorIs(t, err, store.ErrInvalidParams)
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Empty(t, qs)
}

// TestRetryKeepsUniqueness: a cancelled unique job whose key another job took meanwhile cannot be
// retried into a second holder; once the key is free again, it can.
func TestRetryKeepsUniqueness(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	mk := func() *store.InsertParams {
		return &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, UniqueKey: "report"}
	}
	first, second := mk(), mk()
	_, err := s.Insert(ctx, []*store.InsertParams{first})
	require.NoError(t, err)
	_, err = s.CancelJob(ctx, first.ID)
	require.NoError(t, err)
	_, err = s.Insert(ctx, []*store.InsertParams{second})
	require.NoError(t, err)

	_, err = s.RetryJob(ctx, first.ID)
	var ue *store.UniqueConflictError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, second.ID, ue.ExistingID)
	j, err := s.GetJob(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)

	_, err = s.CancelJob(ctx, second.ID)
	require.NoError(t, err)
	_, err = s.RetryJob(ctx, first.ID)
	require.NoError(t, err)
	_, err = s.Insert(ctx, []*store.InsertParams{mk()})
	require.ErrorIs(t, err, store.ErrUniqueConflict, "the retried job holds its key again")
}

// TestReplaceTerminalHolder: a job holding its key in a terminal state cannot be cancelled by a
// replacing insert; it gives up the key instead and keeps its state.
func TestReplaceTerminalHolder(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	mk := func(policy store.OnConflict) *store.InsertParams {
		return &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, UniqueKey: "nightly", OnConflict: policy,
			UniqueStates: []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}}
	}
	old := mk("")
	_, err := s.Insert(ctx, []*store.InsertParams{old})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = s.Finish(ctx, []store.Completion{{ID: old.ID, Attempt: 1, State: store.StateCompleted}})
	require.NoError(t, err)

	repl := mk(store.ConflictReplace)
	_, err = s.Insert(ctx, []*store.InsertParams{repl})
	require.NoError(t, err)
	j, err := s.GetJob(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, j.State)
	require.Empty(t, j.UniqueKey)
	_, err = s.Insert(ctx, []*store.InsertParams{mk("")})
	require.ErrorIs(t, err, store.ErrUniqueConflict, "the replacing job holds the key")
}

// TestRateWithoutPeriodLimitsNothing: a zero field bounds nothing, so a Rate without a Period is a
// valid limit that bounds no window.
func TestRateWithoutPeriodLimitsNothing(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{Rate: 1, OnLimit: store.LimitDrop}))
	var ps []*store.InsertParams
	for range 3 {
		ps = append(ps, &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, RateKey: "k"})
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	info, err := s.GetRateLimit(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, info.WindowCount, "no window is kept without a period")
}

// TestClaimOrderAcrossManyKeys: with more rate-key heaps than a claim scans (so it orders them in a
// heap of its own), a claim still takes jobs in claim order, one per exhausted key.
func TestClaimOrderAcrossManyKeys(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(3, 4))
	type want struct {
		id       string
		priority int
	}
	bestOfKey := map[string]want{}
	var ps []*store.InsertParams
	var unlimited []want
	for i := range 300 {
		p := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 1, Priority: rng.IntN(1000)}
		if i%5 != 0 {
			p.RateKey = fmt.Sprint("key-", rng.IntN(60))
			if b, ok := bestOfKey[p.RateKey]; !ok || p.Priority > b.priority {
				bestOfKey[p.RateKey] = want{p.ID, p.Priority} // ids grow, so a tie keeps the first
			}
		} else {
			unlimited = append(unlimited, want{p.ID, p.Priority})
		}
		ps = append(ps, p)
	}
	for key := range bestOfKey {
		require.NoError(t, s.SetRateLimit(ctx, key, store.RateLimit{MaxActive: 1}))
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)

	expected := append([]want(nil), unlimited...)
	for _, b := range bestOfKey {
		expected = append(expected, b)
	}
	slices.SortFunc(expected, func(a, b want) int {
		if a.priority != b.priority {
			return b.priority - a.priority
		}
		return strings.Compare(a.id, b.id)
	})
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 1000, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	got := make([]string, len(jobs))
	for i, j := range jobs {
		got[i] = j.ID
	}
	wantIDs := make([]string, len(expected))
	for i, e := range expected {
		wantIDs[i] = e.id
	}
	require.Equal(t, wantIDs, got)
}
