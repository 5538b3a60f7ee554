package sqlite

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// claimOne claims the one claimable job of queue q and checks that it is, field by field, the job
// GetJob reads right after: the claim reads plain columns and a packed JSON array (claimedColumns),
// GetJob every column.
func claimOne(t *testing.T, s *Store, q string) *store.Job {
	t.Helper()
	jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: q, Limit: 10, WorkerID: "w-1", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	got, err := s.GetJob(t.Context(), jobs[0].ID)
	require.NoError(t, err)
	require.Equal(t, got, jobs[0])
	return jobs[0]
}

// TestClaimedJobIsStoredJob: a claimed job carries every field as stored, for a plain job (the
// packed column NULL) and for jobs with every optional field set: meta, tags, retry policy, expiry,
// unique key, states and period, an error history and completion time from an earlier attempt, and
// a workflow child's parents, parent results and run condition.
func TestClaimedJobIsStoredJob(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()

	plain := claimOneAfter(t, s, "plain", &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "plain",
		Args: json.RawMessage(`{"x":1}`), State: store.StateAvailable, MaxAttempts: 3})
	require.Nil(t, plain.Meta)
	require.Empty(t, plain.Tags)

	full := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "full", Args: json.RawMessage(`[1,"two"]`),
		Meta: json.RawMessage(`{"trace":"a\"b\\c","n":2}`), Priority: 3, State: store.StateAvailable,
		MaxAttempts: 2, RetryPolicy: json.RawMessage(`{"max_attempts":2}`), Timeout: 1500 * time.Millisecond,
		Tags: []string{"red", "blue, green"}, ExpiresAt: time.Now().Add(time.Hour),
		UniqueKey: "u-1", UniqueStates: []store.State{store.StateAvailable, store.StateActive, store.StateRetryable},
		UniqueUntil: time.Now().Add(time.Hour)}
	first := claimOneAfter(t, s, "full", full)
	require.JSONEq(t, string(full.Meta), string(first.Meta))
	require.Equal(t, full.Tags, first.Tags)
	require.Equal(t, "u-1", first.UniqueKey)

	// A failed attempt leaves an error history; retried at once, the next claim carries it.
	res, err := s.Finish(ctx, []store.Completion{{ID: first.ID, Attempt: 1, Token: first.ClaimToken, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(-time.Millisecond), Error: &store.AttemptError{Attempt: 1, Type: "boom", Message: "it \"failed\""}}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	second := claimOne(t, s, "full")
	require.Equal(t, 2, second.Attempt)
	require.Len(t, second.Errors, 1)
	require.Equal(t, "boom", second.Errors[0].Type)

	// A workflow child, released by its parent's completion, carries its parents and their results.
	wf := uuidv7.New()
	parent := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "wf", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1, WorkflowID: wf}
	child := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "wf", Args: json.RawMessage(`[]`),
		State: store.StatePending, MaxAttempts: 1, ParentIDs: []string{parent.ID}, RunOn: store.RunOnSuccess, WorkflowID: wf}
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Type: "chain", Jobs: []*store.InsertParams{parent, child}})
	require.NoError(t, err)
	p := claimOne(t, s, "wf")
	require.Equal(t, parent.ID, p.ID)
	res, err = s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: 1, Token: p.ClaimToken, State: store.StateCompleted,
		Result: json.RawMessage(`{"ok":true}`)}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	c := claimOne(t, s, "wf")
	require.Equal(t, child.ID, c.ID)
	require.Equal(t, []string{parent.ID}, c.ParentIDs)
	require.NotEmpty(t, c.ParentResults)
	require.NotEmpty(t, c.WorkflowID)
}

// claimOneAfter inserts p and claims it (see claimOne).
func claimOneAfter(t *testing.T, s *Store, q string, p *store.InsertParams) *store.Job {
	t.Helper()
	_, err := s.Insert(t.Context(), []*store.InsertParams{p})
	require.NoError(t, err)
	return claimOne(t, s, q)
}
