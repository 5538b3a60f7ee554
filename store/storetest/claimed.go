package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Stores decode claimed jobs on a path of their own, faster than GetJob's (PostgreSQL reads the
// claim's rows from the wire, SQLite a packed column, Redis a hand-written decoder); these tests hold
// that path to the job as stored.

// claimStored claims the one claimable job of queue and requires it to be, field by field, the job
// GetJob reads right after.
func claimStored(t *testing.T, s store.Store, queue string) *store.Job {
	t.Helper()
	jobs := claim(t, s, queue, 10)
	require.Len(t, jobs, 1)
	require.Equal(t, get(t, s, jobs[0].ID), jobs[0], "the claimed job is the stored job")
	return jobs[0]
}

// testClaimedJobIsStoredJob: a claimed job carries every field as stored, for a plain job and for a
// job with every optional field set (meta, tags, retry policy, timeout, expiry, unique key, states
// and period), and again with the error history of a failed attempt.
func testClaimedJobIsStoredJob(t *testing.T, s store.Store) {
	plainQ, fullQ := uniq("plain"), uniq("full")
	plain := job(plainQ)
	plain.Args = json.RawMessage(`{"x":1}`)
	insert(t, s, plain)
	got := claimStored(t, s, plainQ)
	require.Nil(t, got.Meta)
	require.Empty(t, got.Tags)

	full := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: fullQ, Args: json.RawMessage(`[1,"two"]`),
		Meta: json.RawMessage(`{"trace":"a\"b\\c","n":2}`), Priority: 3, State: store.StateAvailable,
		MaxAttempts: 2, RetryPolicy: json.RawMessage(`{"max_attempts":2}`), Timeout: 1500 * time.Millisecond,
		Tags: []string{"red", "blue, green", ""}, ExpiresAt: time.Now().Add(time.Hour),
		UniqueKey: uniq("u"), UniqueStates: []store.State{store.StateAvailable, store.StateActive, store.StateRetryable},
		UniqueUntil: time.Now().Add(time.Hour)}
	insert(t, s, full)
	first := claimStored(t, s, fullQ)
	require.JSONEq(t, string(full.Meta), string(first.Meta))
	require.Equal(t, full.Tags, first.Tags)
	require.Equal(t, full.UniqueKey, first.UniqueKey)
	require.Equal(t, full.Timeout, first.Timeout)

	// A failed attempt leaves an error history; retried at once, the next claim carries it.
	res, err := s.Finish(ctx(t), []store.Completion{{ID: first.ID, Attempt: 1, Token: first.ClaimToken,
		State: store.StateRetryable, ScheduledAt: time.Now().Add(-time.Millisecond),
		Error: &store.AttemptError{Attempt: 1, Type: "boom", Message: `it "failed"`}}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	second := claimStored(t, s, fullQ)
	require.Equal(t, 2, second.Attempt)
	require.Len(t, second.Errors, 1)
	require.Equal(t, "boom", second.Errors[0].Type)
}

// testWorkflowClaimedChild: a workflow child released by its parent's completion is claimed with its
// workflow, its parents, their results and its run condition, as stored.
func testWorkflowClaimedChild(t *testing.T, s store.Store) {
	q, wf := uniq("wf"), uuidv7.New()
	parent := job(q)
	parent.WorkflowID, parent.MaxAttempts = wf, 1
	child := job(q)
	child.State, child.MaxAttempts, child.WorkflowID = store.StatePending, 1, wf
	child.ParentIDs, child.RunOn = []string{parent.ID}, store.RunOnSuccess
	_, _, err := s.InsertWorkflow(ctx(t), store.WorkflowParams{ID: wf, Type: "chain", Jobs: []*store.InsertParams{parent, child}})
	require.NoError(t, err)

	p := claimStored(t, s, q)
	require.Equal(t, parent.ID, p.ID)
	res, err := s.Finish(ctx(t), []store.Completion{{ID: p.ID, Attempt: 1, Token: p.ClaimToken,
		State: store.StateCompleted, Result: json.RawMessage(`{"ok":true}`)}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)

	c := claimStored(t, s, q)
	require.Equal(t, child.ID, c.ID)
	require.Equal(t, []string{parent.ID}, c.ParentIDs)
	require.NotEmpty(t, c.ParentResults)
	require.Equal(t, wf, c.WorkflowID)
	require.Equal(t, store.RunOnSuccess, c.RunOn)
}
