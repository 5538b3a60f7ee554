package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// The cases of this file join the suite's list here, beside their code.
func init() {
	tests = append(tests,
		testCase{"WorkflowCancelFinished", single(testWorkflowCancelFinished)},
		testCase{"WorkflowCancelRacesCompletion", testWorkflowCancelRacesCompletion},
		testCase{"WorkflowCancelAcrossQueues", single(testWorkflowCancelAcrossQueues)},
	)
}

// requireFinishedRefusal requires err to be CancelWorkflow's refusal of a workflow in state st.
func requireFinishedRefusal(t testing.TB, err error, st store.WorkflowState) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrWorkflowFinished)
	var done *store.WorkflowFinishedError
	require.True(t, errors.As(err, &done), "a *store.WorkflowFinishedError: %v", err)
	require.Equal(t, st, done.State)
}

// testWorkflowCancelFinished: a completed or failed workflow (members and callbacks terminal) is not
// cancelled; a cancelled one may be cancelled again.
func testWorkflowCancelFinished(t *testing.T, s store.Store) {
	q := uniq("wf-cancel-done")

	wf := uuidv7.New()
	a, b := member(wf, q), member(wf, q)
	done := callback(wf, q, store.RunOnComplete, a, b)
	insertWorkflow(t, s, wf, a, b, done)
	complete(t, s, a, "")
	complete(t, s, b, "")
	complete(t, s, done, "")
	_, cancelled, err := workflows(t, s).CancelWorkflow(ctx(t), wf)
	requireFinishedRefusal(t, err, store.WorkflowCompleted)
	require.Empty(t, cancelled)
	w := getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowCompleted, 2, map[store.State]int{store.StateCompleted: 2})
	require.True(t, w.CancelledAt.IsZero(), "a refused cancel leaves no cancellation time")
	requireState(t, s, store.StateCompleted, done)

	wf2 := uuidv7.New()
	c := member(wf2, q)
	d := member(wf2, q, c)
	onFailure := callback(wf2, q, store.RunOnFailure, c, d)
	insertWorkflow(t, s, wf2, c, d, onFailure)
	fail(t, s, c)
	requireState(t, s, store.StateAvailable, onFailure)
	complete(t, s, onFailure, "")
	_, _, err = workflows(t, s).CancelWorkflow(ctx(t), wf2)
	requireFinishedRefusal(t, err, store.WorkflowFailed)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 2,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 1})
	requireState(t, s, store.StateCompleted, onFailure)

	wf3 := uuidv7.New()
	e := member(wf3, q)
	insertWorkflow(t, s, wf3, e)
	first, _, err := workflows(t, s).CancelWorkflow(ctx(t), wf3)
	require.NoError(t, err)
	again, none, err := workflows(t, s).CancelWorkflow(ctx(t), wf3)
	require.NoError(t, err, "cancelling a cancelled workflow is not an error")
	require.Empty(t, none)
	require.Equal(t, store.WorkflowCancelled, again.State)
	requireTimeEqual(t, first.CancelledAt, again.CancelledAt)
}

// testWorkflowCancelRacesCompletion cancels a workflow while its last step completes, from two
// clients: whichever comes first, the workflow ends completed with its step completed, or cancelled
// with its step cancelled, never cancelled with every step completed.
func testWorkflowCancelRacesCompletion(t *testing.T, h Harness) {
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	for round := range 8 {
		q, wf := uniq(fmt.Sprintf("wf-cancel-race-%d", round)), uuidv7.New()
		a := member(wf, q)
		insertWorkflow(t, s1, wf, a)
		j := run(t, s1, a)
		var (
			wg        sync.WaitGroup
			finishRes []store.FinishResult
			finishErr error
			cancelErr error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			finishRes, finishErr = s1.Finish(ctx(t), []store.Completion{{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}})
		}()
		go func() {
			defer wg.Done()
			<-start
			_, _, cancelErr = workflows(t, s2).CancelWorkflow(ctx(t), wf)
		}()
		close(start)
		wg.Wait()
		require.NoError(t, finishErr)
		require.Len(t, finishRes, 1)
		w := getWorkflow(t, s1, wf)
		if cancelErr != nil {
			requireFinishedRefusal(t, cancelErr, store.WorkflowCompleted)
			require.True(t, finishRes[0].Applied, "the cancel was refused: the completion came first")
			requireWorkflow(t, w, store.WorkflowCompleted, 1, map[store.State]int{store.StateCompleted: 1})
			continue
		}
		require.False(t, finishRes[0].Applied, "the cancel came first: the completion is not applied")
		requireWorkflow(t, w, store.WorkflowCancelled, 1, map[store.State]int{store.StateCancelled: 1})
	}
}

// testWorkflowCancelAcrossQueues: a workflow whose jobs span queues (parts of their own on a Redis
// Cluster) is cancelled whole while any member is left, even when the members of one queue all
// completed, and refused once every member finished.
func testWorkflowCancelAcrossQueues(t *testing.T, s store.Store) {
	q1, q2 := uniq("wf-cancel-q1"), uniq("wf-cancel-q2")

	wf := uuidv7.New()
	a, b := member(wf, q1), member(wf, q2)
	cb := callback(wf, q1, store.RunOnComplete, a, b)
	insertWorkflow(t, s, wf, a, b, cb)
	complete(t, s, a, "")
	w, cancelled, err := workflows(t, s).CancelWorkflow(ctx(t), wf)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, w.State)
	require.ElementsMatch(t, []string{b.ID, cb.ID}, ids(cancelled))
	requireState(t, s, store.StateCancelled, b, cb)
	requireState(t, s, store.StateCompleted, a)

	wf2 := uuidv7.New()
	c, d := member(wf2, q1), member(wf2, q2)
	onFailure := callback(wf2, q2, store.RunOnFailure, c, d)
	insertWorkflow(t, s, wf2, c, d, onFailure)
	complete(t, s, c, "")
	fail(t, s, d)
	requireReleasedWith(t, s, onFailure, `[null,null]`)
	complete(t, s, onFailure, "")
	_, _, err = workflows(t, s).CancelWorkflow(ctx(t), wf2)
	requireFinishedRefusal(t, err, store.WorkflowFailed)
	w = getWorkflow(t, s, wf2)
	requireWorkflow(t, w, store.WorkflowFailed, 2, map[store.State]int{store.StateCompleted: 1, store.StateDiscarded: 1})
	require.True(t, w.CancelledAt.IsZero())
	requireState(t, s, store.StateCompleted, onFailure)
}
