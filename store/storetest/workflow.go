package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// The cases of this file added since the suite's list was written join it here.
func init() {
	tests = append(tests, testCase{"WorkflowCallbackOutcomes", single(testWorkflowCallbackOutcomes)})
}

// workflows returns s as a store.Workflows, failing the test if it is not one.
func workflows(t testing.TB, s store.Store) store.Workflows {
	t.Helper()
	w, ok := s.(store.Workflows)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.Workflows", s)
	}
	return w
}

// member returns the parameters of a workflow job in queue with a kind of its own (so reclaim can
// pick it), waiting for parents: pending when it has any, available otherwise.
func member(wf, queue string, parents ...*store.InsertParams) *store.InsertParams {
	p := job(queue)
	p.Kind = uniq("kind")
	p.WorkflowID = wf
	for _, parent := range parents {
		p.ParentIDs = append(p.ParentIDs, parent.ID)
	}
	if len(parents) > 0 {
		p.State = store.StatePending
	}
	return p
}

// WorkflowJob returns the parameters of a job of workflow wf in queue (a fresh id and kind), pending
// on parents when it has any: for a store's own workflow tests beside the suite.
func WorkflowJob(wf, queue string, parents ...*store.InsertParams) *store.InsertParams {
	return member(wf, queue, parents...)
}

// WorkflowCallback returns the parameters of a callback of workflow wf released by on.
func WorkflowCallback(wf, queue string, on store.RunOn, parents ...*store.InsertParams) *store.InsertParams {
	return callback(wf, queue, on, parents...)
}

// callback returns the parameters of a workflow callback released by on.
func callback(wf, queue string, on store.RunOn, parents ...*store.InsertParams) *store.InsertParams {
	p := member(wf, queue, parents...)
	p.RunOn = on
	return p
}

// insertWorkflow inserts the workflow of jobs and requires success.
func insertWorkflow(t testing.TB, s store.Store, id string, jobs ...*store.InsertParams) (*store.Workflow, []*store.Job) {
	t.Helper()
	w, out, err := workflows(t, s).InsertWorkflow(ctx(t), store.WorkflowParams{ID: id, Name: "storetest", Type: "dag", Jobs: jobs})
	require.NoError(t, err)
	require.Equal(t, id, w.ID)
	require.Len(t, out, len(jobs))
	for i, j := range out {
		require.Equal(t, jobs[i].ID, j.ID, "InsertWorkflow returns jobs in the order given")
	}
	return w, out
}

// getWorkflow reads one workflow and requires it to exist.
func getWorkflow(t testing.TB, s store.Store, id string) *store.Workflow {
	t.Helper()
	w, err := workflows(t, s).GetWorkflow(ctx(t), id)
	require.NoError(t, err)
	require.Equal(t, id, w.ID)
	return w
}

// requireWorkflow requires w to be in state with total members counted as counts (absent states: 0).
func requireWorkflow(t testing.TB, w *store.Workflow, state store.WorkflowState, total int, counts map[store.State]int) {
	t.Helper()
	require.Equal(t, state, w.State, "workflow state")
	require.Equal(t, total, w.Total, "workflow total")
	for _, st := range store.AllStates {
		n, ok := w.Counts[st]
		require.True(t, ok, "workflow counts have every state, %s too", st)
		require.Equal(t, counts[st], n, "workflow count of %s", st)
	}
	if state == store.WorkflowRunning {
		require.True(t, w.FinishedAt.IsZero(), "a running workflow has not finished")
	} else {
		requireNow(t, w.FinishedAt, "finished_at of a workflow that is not running")
	}
}

// run claims exactly the job of p (by its kind) and returns it active.
func run(t testing.TB, s store.Store, p *store.InsertParams) *store.Job {
	t.Helper()
	return reclaim(t, s, p.Queue, p.Kind, p.ID, worker, lease)
}

// complete runs p's job and completes it with result.
func complete(t testing.TB, s store.Store, p *store.InsertParams, result string) {
	t.Helper()
	j := run(t, s, p)
	c := store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
	if result != "" {
		c.Result = json.RawMessage(result)
	}
	require.True(t, finish(t, s, c))
}

// fail runs p's job and discards it.
func fail(t testing.TB, s store.Store, p *store.InsertParams) {
	t.Helper()
	j := run(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateDiscarded,
		Error: &store.AttemptError{Attempt: j.Attempt, At: time.Now(), Message: "failed for good"}}))
}

// requireState requires each job of ps to be in state st.
func requireState(t testing.TB, s store.Store, st store.State, ps ...*store.InsertParams) {
	t.Helper()
	for _, p := range ps {
		j := get(t, s, p.ID)
		require.Equal(t, st, j.State, "job %s", p.ID)
		if st.Terminal() {
			require.False(t, j.CompletedAt.IsZero(), "a %s job has completed_at", st)
		}
	}
}

// requireReleased requires p's job to be released: available now with the given parent results.
func requireReleasedWith(t testing.TB, s store.Store, p *store.InsertParams, parentResults string) {
	t.Helper()
	j := get(t, s, p.ID)
	require.Equal(t, store.StateAvailable, j.State, "job %s is released", p.ID)
	requireNow(t, j.ScheduledAt, "scheduled_at of a released job")
	require.JSONEq(t, parentResults, string(j.ParentResults), "parent results of %s", p.ID)
}

func testWorkflowChain(t *testing.T, s store.Store) {
	q, wf := uniq("wf-chain"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, b)
	w, jobs, err := workflows(t, s).InsertWorkflow(ctx(t), store.WorkflowParams{ID: wf, Name: "nightly", Type: "chain",
		Meta: json.RawMessage(`{"owner":"ops"}`), Jobs: []*store.InsertParams{a, b, c}})
	require.NoError(t, err)
	require.Equal(t, "nightly", w.Name)
	require.Equal(t, "chain", w.Type)
	require.JSONEq(t, `{"owner":"ops"}`, string(w.Meta))
	requireNow(t, w.CreatedAt, "created_at of the workflow")
	require.True(t, w.CancelledAt.IsZero())
	requireWorkflow(t, w, store.WorkflowRunning, 3, map[store.State]int{store.StateAvailable: 1, store.StatePending: 2})
	require.Equal(t, []store.State{store.StateAvailable, store.StatePending, store.StatePending},
		[]store.State{jobs[0].State, jobs[1].State, jobs[2].State})
	for i, j := range jobs {
		require.Equal(t, wf, j.WorkflowID)
		require.Empty(t, j.ParentResults, "job %d has not been released", i)
	}

	require.Equal(t, []string{a.ID}, ids(claim(t, s, q, 10)), "only the chain's first step is claimable")
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`{"step":0}`)}))
	requireReleasedWith(t, s, b, `[{"step":0}]`)
	requireState(t, s, store.StatePending, c)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 3,
		map[store.State]int{store.StateCompleted: 1, store.StateAvailable: 1, store.StatePending: 1})

	require.Equal(t, []string{b.ID}, ids(claim(t, s, q, 10)), "the released step is claimable at once")
	require.True(t, finish(t, s, store.Completion{ID: b.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`"step one"`)}))
	requireReleasedWith(t, s, c, `["step one"]`)
	complete(t, s, c, "")

	w = getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowCompleted, 3, map[store.State]int{store.StateCompleted: 3})
	requireTimeEqual(t, get(t, s, c.ID).CompletedAt, w.FinishedAt, "finished_at is the last member's completion")
	require.Equal(t, "nightly", w.Name)
	require.JSONEq(t, `{"owner":"ops"}`, string(w.Meta))
}

// testWorkflowAcrossQueues runs workflows whose jobs are in three queues: a diamond passing results
// from queue to queue, with a child in its parent's own queue beside; a failure cascading through
// two queues into a failure callback in a third; and cancelling such a workflow.
func testWorkflowAcrossQueues(t *testing.T, s store.Store) {
	q1, q2, q3 := uniq("wf-across-1"), uniq("wf-across-2"), uniq("wf-across-3")
	wf := uuidv7.New()
	a := member(wf, q1)
	b := member(wf, q2, a)
	c := member(wf, q3, a)
	d := member(wf, q1, b, c)
	e := member(wf, q1, a)
	insertWorkflow(t, s, wf, a, b, c, d, e)
	requireState(t, s, store.StatePending, b, c, d, e)
	complete(t, s, a, `"a"`)
	requireReleasedWith(t, s, b, `["a"]`)
	requireReleasedWith(t, s, c, `["a"]`)
	requireReleasedWith(t, s, e, `["a"]`)
	requireState(t, s, store.StatePending, d)
	complete(t, s, c, `{"c":3}`)
	requireState(t, s, store.StatePending, d)
	complete(t, s, b, `"b"`)
	requireReleasedWith(t, s, d, `["b",{"c":3}]`)
	complete(t, s, d, "")
	complete(t, s, e, "")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowCompleted, 5, map[store.State]int{store.StateCompleted: 5})
	jobs, _, err := s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID, b.ID, c.ID, d.ID, e.ID}, ids(jobs), "the workflow's jobs of every queue, in id order")

	wf2 := uuidv7.New()
	x := member(wf2, q1)
	y := member(wf2, q2, x)
	z := member(wf2, q3, y)
	f := callback(wf2, q3, store.RunOnFailure, x)
	insertWorkflow(t, s, wf2, x, y, z, f)
	fail(t, s, x)
	requireState(t, s, store.StateCancelled, y, z)
	requireReleasedWith(t, s, f, `[null]`)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 3,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 2})
	complete(t, s, f, "")
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 3,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 2})

	wf3 := uuidv7.New()
	m := member(wf3, q2)
	n := member(wf3, q3, m)
	insertWorkflow(t, s, wf3, m, n)
	run(t, s, m)
	w, cancelled, err := workflows(t, s).CancelWorkflow(ctx(t), wf3)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, w.State)
	require.Equal(t, []string{m.ID, n.ID}, ids(cancelled), "the cancelled jobs of every queue")
	require.Equal(t, []store.State{store.StateActive, store.StatePending}, []store.State{cancelled[0].State, cancelled[1].State})
	requireState(t, s, store.StateCancelled, m, n)
}

func testWorkflowFailureCascade(t *testing.T, s store.Store) {
	q, wf := uniq("wf-fail"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, b)
	d := member(wf, q, c)
	insertWorkflow(t, s, wf, a, b, c, d)
	complete(t, s, a, `1`)
	fail(t, s, b)
	requireState(t, s, store.StateCancelled, c, d)
	requireState(t, s, store.StateDiscarded, b)
	require.Empty(t, claim(t, s, q, 10), "nothing after the failed step runs")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowFailed, 4,
		map[store.State]int{store.StateCompleted: 1, store.StateDiscarded: 1, store.StateCancelled: 2})

	// A step that gets another attempt does not end the chain.
	q2, wf2 := uniq("wf-retry"), uuidv7.New()
	x := member(wf2, q2)
	y := member(wf2, q2, x)
	insertWorkflow(t, s, wf2, x, y)
	j := run(t, s, x)
	require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: 1, State: store.StateRetryable}))
	requireState(t, s, store.StatePending, y)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 2,
		map[store.State]int{store.StateRetryable: 1, store.StatePending: 1})
	complete(t, s, x, `"second try"`)
	requireReleasedWith(t, s, y, `["second try"]`)
}

func testWorkflowCancelJobCascades(t *testing.T, s store.Store) {
	q, wf := uniq("wf-cancel-job"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, b)
	insertWorkflow(t, s, wf, a, b, c)
	_, err := s.CancelJob(ctx(t), a.ID)
	require.NoError(t, err)
	requireState(t, s, store.StateCancelled, a, b, c)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowFailed, 3, map[store.State]int{store.StateCancelled: 3})

	// Cancelling a pending step cascades to its children while its parent still runs.
	q2, wf2 := uniq("wf-cancel-pending"), uuidv7.New()
	x := member(wf2, q2)
	y := member(wf2, q2, x)
	z := member(wf2, q2, y)
	insertWorkflow(t, s, wf2, x, y, z)
	xa := run(t, s, x)
	_, err = s.CancelJob(ctx(t), y.ID)
	require.NoError(t, err)
	requireState(t, s, store.StateCancelled, y, z)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 3,
		map[store.State]int{store.StateActive: 1, store.StateCancelled: 2})
	require.True(t, finish(t, s, store.Completion{ID: xa.ID, Attempt: 1, State: store.StateCompleted}))
	requireState(t, s, store.StateCancelled, y, z)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 3,
		map[store.State]int{store.StateCompleted: 1, store.StateCancelled: 2})
}

func testWorkflowRescueCascades(t *testing.T, s store.Store) {
	q, wf := uniq("wf-rescue"), uuidv7.New()
	a := member(wf, q)
	a.MaxAttempts = 1
	b := member(wf, q, a)
	insertWorkflow(t, s, wf, a, b)
	reclaim(t, s, q, a.Kind, a.ID, worker, 50*time.Millisecond)
	eventually(t, "the spent member to be discarded by Rescue", func() bool {
		res, err := s.Rescue(ctx(t), store.RescueParams{Limit: 10})
		require.NoError(t, err)
		return len(res.Discarded) == 1
	})
	requireState(t, s, store.StateDiscarded, a)
	requireState(t, s, store.StateCancelled, b)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowFailed, 2,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 1})

	// An expired member discarded by DiscardExpired cascades too.
	q2, wf2 := uniq("wf-expire"), uuidv7.New()
	x := member(wf2, q2)
	x.State, x.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	x.ExpiresAt = time.Now().Add(100 * time.Millisecond)
	y := member(wf2, q2, x)
	insertWorkflow(t, s, wf2, x, y)
	eventually(t, "the expired member to be discarded", func() bool {
		_, err := s.DiscardExpired(ctx(t), 10)
		require.NoError(t, err)
		return get(t, s, x.ID).State == store.StateDiscarded
	})
	requireState(t, s, store.StateCancelled, y)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 2,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 1})
}

func testWorkflowGroup(t *testing.T, s store.Store) {
	q, wf := uniq("wf-group"), uuidv7.New()
	a, b, c := member(wf, q), member(wf, q), member(wf, q)
	w, _ := insertWorkflow(t, s, wf, a, b, c)
	requireWorkflow(t, w, store.WorkflowRunning, 3, map[store.State]int{store.StateAvailable: 3})
	fail(t, s, a)
	requireState(t, s, store.StateAvailable, b, c)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 3,
		map[store.State]int{store.StateDiscarded: 1, store.StateAvailable: 2})
	complete(t, s, b, "")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 3,
		map[store.State]int{store.StateDiscarded: 1, store.StateCompleted: 1, store.StateAvailable: 1})
	complete(t, s, c, "")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowFailed, 3,
		map[store.State]int{store.StateDiscarded: 1, store.StateCompleted: 2})
}

// batchWorkflow inserts members a and b with one callback of each kind on both.
func batchWorkflow(t *testing.T, s store.Store, q string) (wf string, a, b, onSuccess, onFailure, onComplete *store.InsertParams) {
	wf = uuidv7.New()
	a, b = member(wf, q), member(wf, q)
	onSuccess = callback(wf, q, store.RunOnSuccess, a, b)
	onFailure = callback(wf, q, store.RunOnFailure, a, b)
	onComplete = callback(wf, q, store.RunOnComplete, a, b)
	w, jobs := insertWorkflow(t, s, wf, a, b, onSuccess, onFailure, onComplete)
	requireWorkflow(t, w, store.WorkflowRunning, 2, map[store.State]int{store.StateAvailable: 2})
	for i, on := range []store.RunOn{"", "", store.RunOnSuccess, store.RunOnFailure, store.RunOnComplete} {
		require.Equal(t, on, jobs[i].RunOn)
	}
	return wf, a, b, onSuccess, onFailure, onComplete
}

func testWorkflowCallbacksSuccess(t *testing.T, s store.Store) {
	q := uniq("wf-batch-ok")
	wf, a, b, onSuccess, onFailure, onComplete := batchWorkflow(t, s, q)
	complete(t, s, a, `"a"`)
	requireState(t, s, store.StatePending, onSuccess, onFailure, onComplete)
	complete(t, s, b, `"b"`)
	requireReleasedWith(t, s, onSuccess, `["a","b"]`)
	requireReleasedWith(t, s, onComplete, `["a","b"]`)
	requireState(t, s, store.StateCancelled, onFailure)
	// The callbacks still to run keep the workflow running (ojs-workflows.md §9.4).
	w := getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowRunning, 2, map[store.State]int{store.StateCompleted: 2})
	require.Equal(t, store.CallbackCounts{Total: 3, Cancelled: 1}, w.Callbacks)

	complete(t, s, onSuccess, "")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 2, map[store.State]int{store.StateCompleted: 2})
	complete(t, s, onComplete, "")
	w = getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowCompleted, 2, map[store.State]int{store.StateCompleted: 2})
	require.Equal(t, store.CallbackCounts{Total: 3, Completed: 2, Cancelled: 1}, w.Callbacks)
	requireTimeEqual(t, get(t, s, onComplete.ID).CompletedAt, w.FinishedAt, "finished_at is the last callback's completion")
}

func testWorkflowCallbacksFailure(t *testing.T, s store.Store) {
	q := uniq("wf-batch-fail")
	wf, a, b, onSuccess, onFailure, onComplete := batchWorkflow(t, s, q)
	aj := run(t, s, a)
	fail(t, s, b)
	requireState(t, s, store.StateCancelled, onSuccess)
	requireState(t, s, store.StatePending, onFailure, onComplete)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 2,
		map[store.State]int{store.StateActive: 1, store.StateDiscarded: 1})

	require.True(t, finish(t, s, store.Completion{ID: aj.ID, Attempt: 1, State: store.StateCompleted,
		Result: json.RawMessage(`{"a":true}`)}))
	requireReleasedWith(t, s, onFailure, `[{"a":true},null]`)
	requireReleasedWith(t, s, onComplete, `[{"a":true},null]`)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 2,
		map[store.State]int{store.StateCompleted: 1, store.StateDiscarded: 1})
	complete(t, s, onFailure, "")
	complete(t, s, onComplete, "")
	// Its callbacks completed; the member that failed fails it.
	w := getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowFailed, 2,
		map[store.State]int{store.StateCompleted: 1, store.StateDiscarded: 1})
	require.Equal(t, store.CallbackCounts{Total: 3, Completed: 2, Cancelled: 1}, w.Callbacks)

	// When every parent fails, on_failure runs and on_success never does.
	q2 := uniq("wf-batch-allfail")
	wf2, x, y, onSuccess2, onFailure2, onComplete2 := batchWorkflow(t, s, q2)
	_, err := s.CancelJob(ctx(t), x.ID)
	require.NoError(t, err)
	requireState(t, s, store.StateCancelled, onSuccess2)
	requireState(t, s, store.StatePending, onFailure2, onComplete2)
	fail(t, s, y)
	requireReleasedWith(t, s, onFailure2, `[null,null]`)
	requireReleasedWith(t, s, onComplete2, `[null,null]`)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 2,
		map[store.State]int{store.StateCancelled: 1, store.StateDiscarded: 1})
	complete(t, s, onFailure2, "")
	complete(t, s, onComplete2, "")
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 2,
		map[store.State]int{store.StateCancelled: 1, store.StateDiscarded: 1})
}

// testWorkflowCallbackOutcomes: a callback is a job like any other whose outcome counts in its
// workflow's (ojs-workflows.md §9.4 rule 4, §9.5): the workflow runs until its callbacks that will
// run have finished, fails when one is discarded, and may be cancelled while one is left; a
// callback cancelled because its condition did not hold is no failure.
func testWorkflowCallbackOutcomes(t *testing.T, s store.Store) {
	q := uniq("wf-callback-outcome")

	// on_success discarded after its one attempt: the batch fails, its members all completed.
	wf := uuidv7.New()
	a, b := member(wf, q), member(wf, q)
	onSuccess := callback(wf, q, store.RunOnSuccess, a, b)
	onSuccess.MaxAttempts = 1
	insertWorkflow(t, s, wf, a, b, onSuccess)
	complete(t, s, a, "")
	complete(t, s, b, "")
	requireReleasedWith(t, s, onSuccess, `[null,null]`)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 2, map[store.State]int{store.StateCompleted: 2})
	j := run(t, s, onSuccess)
	require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateRetryable,
		Error: &store.AttemptError{Attempt: j.Attempt, At: time.Now(), Message: "try again"}}))
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 2, map[store.State]int{store.StateCompleted: 2})
	fail(t, s, onSuccess)
	w := getWorkflow(t, s, wf)
	requireWorkflow(t, w, store.WorkflowFailed, 2, map[store.State]int{store.StateCompleted: 2})
	require.Equal(t, store.CallbackCounts{Total: 1, Discarded: 1}, w.Callbacks)
	requireTimeEqual(t, get(t, s, onSuccess.ID).CompletedAt, w.FinishedAt, "finished_at is the callback's end")
	_, _, err := workflows(t, s).CancelWorkflow(ctx(t), wf)
	require.ErrorIs(t, err, store.ErrWorkflowFinished, "every job is terminal: the failed workflow stays failed")

	// on_failure cancelled as its members all completed, on_success completed: the batch completed.
	wf2 := uuidv7.New()
	c := member(wf2, q)
	onFailure := callback(wf2, q, store.RunOnFailure, c)
	onSuccess2 := callback(wf2, q, store.RunOnSuccess, c)
	insertWorkflow(t, s, wf2, c, onFailure, onSuccess2)
	complete(t, s, c, "")
	requireState(t, s, store.StateCancelled, onFailure)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 1, map[store.State]int{store.StateCompleted: 1})
	complete(t, s, onSuccess2, "")
	w = getWorkflow(t, s, wf2)
	requireWorkflow(t, w, store.WorkflowCompleted, 1, map[store.State]int{store.StateCompleted: 1})
	require.Equal(t, store.CallbackCounts{Total: 2, Completed: 1, Cancelled: 1}, w.Callbacks)

	// Only on_failure, cancelled by its condition: the workflow completed with its member.
	wf3 := uuidv7.New()
	d := member(wf3, q)
	onFailure3 := callback(wf3, q, store.RunOnFailure, d)
	insertWorkflow(t, s, wf3, d, onFailure3)
	complete(t, s, d, "")
	requireState(t, s, store.StateCancelled, onFailure3)
	requireWorkflow(t, getWorkflow(t, s, wf3), store.WorkflowCompleted, 1, map[store.State]int{store.StateCompleted: 1})

	// A workflow waiting only on its callback (running it) is running: CancelWorkflow cancels it.
	wf4 := uuidv7.New()
	e := member(wf4, q)
	onComplete := callback(wf4, q, store.RunOnComplete, e)
	insertWorkflow(t, s, wf4, e, onComplete)
	complete(t, s, e, "")
	cj := run(t, s, onComplete)
	w, cancelled, err := workflows(t, s).CancelWorkflow(ctx(t), wf4)
	require.NoError(t, err)
	requireWorkflow(t, w, store.WorkflowCancelled, 1, map[store.State]int{store.StateCompleted: 1})
	require.Equal(t, []string{onComplete.ID}, ids(cancelled))
	require.Equal(t, store.StateActive, cancelled[0].State, "the callback as it was")
	require.Equal(t, cj.ClaimToken, cancelled[0].ClaimToken, "the run it stopped")
	requireState(t, s, store.StateCancelled, onComplete)
	require.False(t, finish(t, s, store.Completion{ID: cj.ID, Attempt: cj.Attempt, State: store.StateCompleted}),
		"the cancelled callback's completion is not applied")

	// The same across queues (parts of their own on a Redis Cluster): the callback's queue holds no
	// member.
	q2 := uniq("wf-callback-outcome-2")
	wf5 := uuidv7.New()
	f := member(wf5, q)
	onComplete5 := callback(wf5, q2, store.RunOnComplete, f)
	insertWorkflow(t, s, wf5, f, onComplete5)
	complete(t, s, f, "")
	eventually(t, "the callback in the other queue to be released", func() bool {
		return get(t, s, onComplete5.ID).State == store.StateAvailable
	})
	requireWorkflow(t, getWorkflow(t, s, wf5), store.WorkflowRunning, 1, map[store.State]int{store.StateCompleted: 1})
	w, cancelled, err = workflows(t, s).CancelWorkflow(ctx(t), wf5)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, w.State)
	require.Equal(t, []string{onComplete5.ID}, ids(cancelled))
	requireState(t, s, store.StateCancelled, onComplete5)
}

func testWorkflowDiamond(t *testing.T, s store.Store) {
	q, wf := uniq("wf-diamond"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, a)
	d := member(wf, q, c, b) // parents deliberately not in completion order
	insertWorkflow(t, s, wf, a, b, c, d)
	complete(t, s, a, `"root"`)
	requireReleasedWith(t, s, b, `["root"]`)
	requireReleasedWith(t, s, c, `["root"]`)
	requireState(t, s, store.StatePending, d)
	complete(t, s, b, `{"b":1}`)
	requireState(t, s, store.StatePending, d)
	complete(t, s, c, "")
	requireReleasedWith(t, s, d, `[null,{"b":1}]`)
	complete(t, s, d, "")
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowCompleted, 4, map[store.State]int{store.StateCompleted: 4})
}

func testWorkflowCancel(t *testing.T, s store.Store) {
	q, wf := uniq("wf-cancel"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, b)
	cb := callback(wf, q, store.RunOnComplete, c)
	other := member(uuidv7.New(), q)
	insertWorkflow(t, s, other.WorkflowID, other)
	insertWorkflow(t, s, wf, a, b, c, cb)
	aj := run(t, s, a)
	listener := listen(t, s)

	w, cancelled, err := workflows(t, s).CancelWorkflow(ctx(t), wf)
	require.NoError(t, err)
	requireNow(t, w.CancelledAt, "cancelled_at")
	// The jobs it cancelled, in id order, as they were: the caller reports the cancels no run reports.
	want := []string{a.ID, b.ID, c.ID, cb.ID}
	slices.Sort(want)
	require.Equal(t, want, ids(cancelled))
	for _, j := range cancelled {
		require.Equal(t, q, j.Queue)
		require.Equal(t, wf, j.WorkflowID)
		if j.ID == a.ID {
			require.Equal(t, store.StateActive, j.State, "the active job as it was")
			require.Equal(t, worker, j.WorkerID, "the worker whose run it stopped")
			require.Equal(t, aj.ClaimToken, j.ClaimToken, "the run it stopped")
		} else {
			require.Equal(t, store.StatePending, j.State, "job %s as it was", j.ID)
		}
	}
	requireWorkflow(t, w, store.WorkflowCancelled, 3, map[store.State]int{store.StateCancelled: 3})
	requireState(t, s, store.StateCancelled, a, b, c, cb)
	requireState(t, s, store.StateAvailable, other)
	// The claim it ended is in the active job's history (as CancelJob records it); the others had none.
	ga := get(t, s, a.ID)
	require.Len(t, ga.Errors, 1)
	require.Equal(t, store.ErrorTypeCancelled, ga.Errors[0].Type)
	require.Equal(t, 1, ga.Errors[0].Attempt)
	require.Empty(t, get(t, s, b.ID).Errors)
	eventually(t, "the cancel notification of the workflow's active job", func() bool {
		return len(listener.matching(func(n store.Notification) bool {
			return n.Kind == store.NotifyCancel && n.JobID == a.ID
		})) == 1
	})
	require.NotEmpty(t, aj.ClaimToken)
	require.Equal(t, aj.ClaimToken, listener.matching(func(n store.Notification) bool {
		return n.Kind == store.NotifyCancel && n.JobID == a.ID
	})[0].ClaimToken, "the notification names the run it stops")
	require.False(t, finish(t, s, store.Completion{ID: aj.ID, Attempt: 1, State: store.StateCompleted}),
		"the cancelled job's completion is not applied")
	require.Equal(t, []string{other.ID}, ids(claim(t, s, q, 10)), "nothing of the cancelled workflow runs")

	again, none, err := workflows(t, s).CancelWorkflow(ctx(t), wf)
	require.NoError(t, err, "cancelling twice is not an error")
	require.Empty(t, none, "a second cancel cancels nothing")
	requireWorkflow(t, again, store.WorkflowCancelled, 3, map[store.State]int{store.StateCancelled: 3})
	requireTimeEqual(t, w.CancelledAt, again.CancelledAt, "a second cancel keeps the first's time")
	got := getWorkflow(t, s, wf)
	requireWorkflow(t, got, store.WorkflowCancelled, 3, map[store.State]int{store.StateCancelled: 3})
	requireTimeEqual(t, w.CancelledAt, got.CancelledAt)

	_, _, err = workflows(t, s).CancelWorkflow(ctx(t), uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testWorkflowNotFound(t *testing.T, s store.Store) {
	q := uniq("wf-none")
	p := member(uuidv7.New(), q)
	insertWorkflow(t, s, p.WorkflowID, p)
	w, err := workflows(t, s).GetWorkflow(ctx(t), uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Nil(t, w)
	jobs, _, err := s.ListJobs(ctx(t), store.ListParams{WorkflowID: uuidv7.New()})
	require.NoError(t, err)
	require.Empty(t, jobs, "an unknown workflow has no jobs")
}

func testWorkflowListJobs(t *testing.T, s store.Store) {
	q := uniq("wf-list")
	wf1, wf2 := uuidv7.New(), uuidv7.New()
	a := member(wf1, q)
	b := member(wf1, q, a)
	cb := callback(wf1, q, store.RunOnFailure, b)
	x := member(wf2, q)
	insertWorkflow(t, s, wf1, a, b, cb)
	insertWorkflow(t, s, wf2, x)
	plain := job(q)
	insert(t, s, plain)

	jobs, next, err := s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf1})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, sortedIDs([]string{a.ID, b.ID, cb.ID}), ids(jobs), "members and callbacks, in id order")
	for _, j := range jobs {
		require.Equal(t, wf1, j.WorkflowID)
	}
	jobs, _, err = s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf1, States: []store.State{store.StatePending}})
	require.NoError(t, err)
	require.Equal(t, sortedIDs([]string{b.ID, cb.ID}), ids(jobs), "the workflow filter combines with the others")
	jobs, next, err = s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf1, Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.NotEmpty(t, next)
	rest, _, err := s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf1, After: next})
	require.NoError(t, err)
	require.Equal(t, sortedIDs([]string{a.ID, b.ID, cb.ID}), append(ids(jobs), ids(rest)...))
	jobs, _, err = s.ListJobs(ctx(t), store.ListParams{WorkflowID: wf2})
	require.NoError(t, err)
	require.Equal(t, []string{x.ID}, ids(jobs))
}

func testWorkflowInvalid(t *testing.T, s store.Store) {
	q := uniq("wf-invalid")
	existing := member(uuidv7.New(), q)
	insertWorkflow(t, s, existing.WorkflowID, existing)
	plain := job(q)
	insert(t, s, plain)

	cases := map[string]func(wf string) []*store.InsertParams{
		"parent outside the workflow": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			b := member(wf, q, a)
			b.ParentIDs = []string{uuidv7.New()}
			return []*store.InsertParams{a, b}
		},
		"parent in another workflow": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			b := member(wf, q, existing)
			return []*store.InsertParams{a, b}
		},
		"parent later in the list": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			c := member(wf, q)
			b := member(wf, q, a, c)
			return []*store.InsertParams{a, b, c}
		},
		"parent named twice": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			b := member(wf, q, a, a)
			return []*store.InsertParams{a, b}
		},
		"job with parents not pending": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			b := member(wf, q, a)
			b.State = store.StateAvailable
			return []*store.InsertParams{a, b}
		},
		"duplicate id": func(wf string) []*store.InsertParams {
			a, b := member(wf, q), member(wf, q)
			b.ID = a.ID
			return []*store.InsertParams{a, b}
		},
		"job of another workflow": func(wf string) []*store.InsertParams {
			return []*store.InsertParams{member(wf, q), member(uuidv7.New(), q)}
		},
		"unique key": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			a.UniqueKey = uniq("key")
			return []*store.InsertParams{member(wf, q), a}
		},
		"callback without parents": func(wf string) []*store.InsertParams {
			return []*store.InsertParams{member(wf, q), callback(wf, q, store.RunOnSuccess)}
		},
		"unknown run-on": func(wf string) []*store.InsertParams {
			a := member(wf, q)
			return []*store.InsertParams{a, callback(wf, q, "sometimes", a)}
		},
		"no jobs": func(string) []*store.InsertParams { return nil },
	}
	for name, mk := range cases {
		wf := uuidv7.New()
		jobs := mk(wf)
		_, _, err := workflows(t, s).InsertWorkflow(ctx(t), store.WorkflowParams{ID: wf, Type: "dag", Jobs: jobs})
		require.ErrorIs(t, err, store.ErrInvalidParams, name)
		_, err = workflows(t, s).GetWorkflow(ctx(t), wf)
		require.ErrorIs(t, err, store.ErrNotFound, "%s: no workflow is stored", name)
		for _, p := range jobs {
			if p.ID != existing.ID {
				requireAbsent(t, s, p.ID)
			}
		}
	}

	// Ids that exist already are duplicates; nothing of the workflow is stored.
	again := member(existing.WorkflowID, q)
	_, _, err := workflows(t, s).InsertWorkflow(ctx(t), store.WorkflowParams{ID: existing.WorkflowID,
		Jobs: []*store.InsertParams{again}})
	require.ErrorIs(t, err, store.ErrDuplicate, "an existing workflow id")
	requireAbsent(t, s, again.ID)
	wf := uuidv7.New()
	a := member(wf, q)
	dup := member(wf, q)
	dup.ID = plain.ID
	_, _, err = workflows(t, s).InsertWorkflow(ctx(t), store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{a, dup}})
	require.ErrorIs(t, err, store.ErrDuplicate, "an existing job id")
	requireAbsent(t, s, a.ID)
	_, err = workflows(t, s).GetWorkflow(ctx(t), wf)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Len(t, queueJobs(t, s, q), 2, "only the jobs inserted before remain")
	require.Equal(t, store.StateAvailable, get(t, s, plain.ID).State)
}

func testWorkflowNotify(t *testing.T, h Harness) {
	s := h.New(t)
	c := listen(t, s)
	q1, q2 := uniq("wf-notify-root"), uniq("wf-notify-child")
	wf := uuidv7.New()
	a := member(wf, q1)
	b := member(wf, q2, a)
	insertWorkflow(t, s, wf, a, b)
	eventually(t, "the root's queue to be announced", func() bool { return len(c.inserts(q1)) == 1 })
	settle(t, s, c)
	require.True(t, c.inserts(q1)[0].DueAt.IsZero(), "a root due now is announced as due now")
	require.Empty(t, c.inserts(q2), "a pending child's queue is not announced at insert")

	complete(t, s, a, "")
	eventually(t, "the released child's queue to be announced", func() bool { return len(c.inserts(q2)) == 1 })
	require.True(t, c.inserts(q2)[0].DueAt.IsZero(), "a released child is due now")
}

func testWorkflowReopen(t *testing.T, h Harness) {
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	q, wf := uniq("wf-reopen"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	insertWorkflow(t, s1, wf, a, b)
	complete(t, s2, a, `"from s2"`)
	requireReleasedWith(t, s1, b, `["from s2"]`)
	complete(t, s1, b, "")
	requireWorkflow(t, getWorkflow(t, s2, wf), store.WorkflowCompleted, 2, map[store.State]int{store.StateCompleted: 2})
}

// testWorkflowConcurrentParents completes the parents of one child at once from several clients:
// however their transactions interleave, the child is released exactly once.
func testWorkflowConcurrentParents(t *testing.T, h Harness) {
	const parents = 6
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	for round := range 5 {
		q, wf := uniq(fmt.Sprintf("wf-fanin-%d", round)), uuidv7.New()
		var ps []*store.InsertParams
		for range parents {
			ps = append(ps, member(wf, q))
		}
		child := member(wf, q, ps...)
		insertWorkflow(t, s1, wf, append(ps, child)...)
		active := make([]*store.Job, parents)
		for i, p := range ps {
			active[i] = run(t, s1, p)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, parents)
		for i, j := range active {
			st := s1
			if i%2 == 1 {
				st = s2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = st.Finish(ctx(t), []store.Completion{{ID: j.ID, Attempt: 1, State: store.StateCompleted,
					Result: json.RawMessage(fmt.Sprint(i))}})
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		requireReleasedWith(t, s1, child, `[0,1,2,3,4,5]`)
		require.Equal(t, []string{child.ID}, ids(claim(t, s2, q, 10)))
	}
}

func testWorkflowManualOps(t *testing.T, s store.Store) {
	q := uniq("wf-manual")

	// ActivateJob releases a pending member without its parents; its parent's outcome leaves it be.
	wf := uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	insertWorkflow(t, s, wf, a, b)
	j, err := s.ActivateJob(ctx(t), b.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.Empty(t, get(t, s, b.ID).ParentResults, "a member activated by hand has no parent results")
	bj := run(t, s, b)
	complete(t, s, a, `"late"`)
	after := get(t, s, b.ID)
	require.Equal(t, store.StateActive, after.State, "a job that left pending is not released again")
	require.Equal(t, bj.Attempt, after.Attempt)

	// RetryJob runs a discarded member again; its cancelled children stay cancelled.
	wf2 := uuidv7.New()
	x := member(wf2, q)
	y := member(wf2, q, x)
	insertWorkflow(t, s, wf2, x, y)
	fail(t, s, x)
	requireState(t, s, store.StateCancelled, y)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 2,
		map[store.State]int{store.StateDiscarded: 1, store.StateCancelled: 1})
	_, err = s.RetryJob(ctx(t), x.ID)
	require.NoError(t, err)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowRunning, 2,
		map[store.State]int{store.StateAvailable: 1, store.StateCancelled: 1})
	complete(t, s, x, "")
	requireState(t, s, store.StateCancelled, y)
	requireWorkflow(t, getWorkflow(t, s, wf2), store.WorkflowFailed, 2,
		map[store.State]int{store.StateCompleted: 1, store.StateCancelled: 1})

	// DeleteJob of a member its pending child waits for is refused (the child would wait for
	// good); once the workflow is cancelled nothing waits for it and it can go.
	wf3 := uuidv7.New()
	m := member(wf3, q)
	n := member(wf3, q, m)
	insertWorkflow(t, s, wf3, m, n)
	_, err = s.DeleteJob(ctx(t), m.ID)
	requireTransitionError(t, err, m.ID, store.StateAvailable)
	requireState(t, s, store.StatePending, n)
	_, _, err = workflows(t, s).CancelWorkflow(ctx(t), wf3)
	require.NoError(t, err)
	requireState(t, s, store.StateCancelled, m, n)
	_, err = s.DeleteJob(ctx(t), m.ID)
	require.NoError(t, err)
	requireGone(t, s, m.ID)
}

func testWorkflowLongChain(t *testing.T, s store.Store) {
	const steps = 300
	q, wf := uniq("wf-long"), uuidv7.New()
	ps := []*store.InsertParams{member(wf, q)}
	for range steps - 1 {
		ps = append(ps, member(wf, q, ps[len(ps)-1]))
	}
	insertWorkflow(t, s, wf, ps...)
	_, err := s.CancelJob(ctx(t), ps[0].ID)
	require.NoError(t, err)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowFailed, steps, map[store.State]int{store.StateCancelled: steps})
	requireState(t, s, store.StateCancelled, ps[steps-1])
}

func testWorkflowRoundTrip(t *testing.T, s store.Store) {
	q, wf := uniq("wf-fields"), uuidv7.New()
	root := fullJob(q)
	root.UniqueKey, root.UniqueStates, root.UniqueUntil = "", nil, time.Time{}
	root.WorkflowID = wf
	other := fullJob(q)
	other.UniqueKey, other.UniqueStates, other.UniqueUntil = "", nil, time.Time{}
	other.WorkflowID, other.State, other.ScheduledAt = wf, store.StateAvailable, time.Time{}
	child := fullJob(q)
	child.UniqueKey, child.UniqueStates, child.UniqueUntil = "", nil, time.Time{}
	child.WorkflowID, child.State = wf, store.StatePending
	child.ParentIDs = []string{other.ID, root.ID}
	cb := fullJob(q)
	cb.UniqueKey, cb.UniqueStates, cb.UniqueUntil = "", nil, time.Time{}
	cb.WorkflowID, cb.State, cb.RunOn = wf, store.StatePending, store.RunOnComplete
	cb.ParentIDs = []string{child.ID}
	params := []*store.InsertParams{root, other, child, cb}
	_, jobs := insertWorkflow(t, s, wf, params...)
	for i, p := range params {
		requireInserted(t, p, jobs[i])
		requireInserted(t, p, get(t, s, p.ID))
	}

	// The store keeps its own copy of the parent lists.
	child.ParentIDs[0] = "changed"
	jobs[2].ParentIDs[1] = "changed"
	require.Equal(t, []string{other.ID, root.ID}, get(t, s, child.ID).ParentIDs)
}

// testWorkflowCleanup: Cleanup keeps a finished job whose children still wait for it, and a workflow
// whose jobs Cleanup has all deleted is gone with them.
func testWorkflowCleanup(t *testing.T, s store.Store) {
	q, wf := uniq("wf-cleanup"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	insertWorkflow(t, s, wf, a, b)
	complete(t, s, a, `1`)
	j := run(t, s, b)
	// While b runs, a's outcome is still needed by no one (b was released), so a may go.
	_, err := s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	w := getWorkflow(t, s, wf)
	require.Equal(t, store.WorkflowRunning, w.State, "a workflow with a running job is kept")
	require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}))
	n, err := s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	_, err = workflows(t, s).GetWorkflow(ctx(t), wf)
	require.ErrorIs(t, err, store.ErrNotFound, "a workflow whose jobs are all cleaned up is gone")
}

// testWorkflowCleanupKeepsWaitedParents: a parent that finished long ago is kept by Cleanup and by
// PruneDiscarded while a pending child still waits for its siblings: the child is released with the
// parent's result when the last parent completes, and then the parents may go.
func testWorkflowCleanupKeepsWaitedParents(t *testing.T, s store.Store) {
	q, wf := uniq("wf-keep"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q)
	d := member(wf, q)
	c := callback(wf, q, store.RunOnComplete, a, b, d)
	insertWorkflow(t, s, wf, a, b, d, c)
	complete(t, s, a, `"from a"`)
	fail(t, s, d)
	j := run(t, s, b)
	n, err := s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour),
		DiscardedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "a and d are waited for by c")
	got, err := s.(store.DiscardedPruner).PruneDiscarded(ctx(t), store.PruneParams{Before: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Empty(t, got, "d is waited for by c")
	requireState(t, s, store.StateCompleted, a)
	requireState(t, s, store.StateDiscarded, d)

	require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted, Result: json.RawMessage(`"from b"`)}))
	requireReleasedWith(t, s, c, `["from a","from b",null]`)
	n, err = s.Cleanup(ctx(t), store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour),
		DiscardedBefore: time.Now().Add(time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 3, n, "released, c waits for none of them")
}

// testWorkflowDeleteWaitedParentRefused: DeleteJob refuses a finished parent that a pending child
// still waits for (deleting it would leave the child pending for good), and deletes it once the
// child is released.
func testWorkflowDeleteWaitedParentRefused(t *testing.T, s store.Store) {
	q, wf := uniq("wf-del"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q)
	c := member(wf, q, a, b)
	insertWorkflow(t, s, wf, a, b, c)
	complete(t, s, a, `"from a"`)
	_, err := s.DeleteJob(ctx(t), a.ID)
	requireTransitionError(t, err, a.ID, store.StateCompleted)
	var te *store.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, store.ReasonAwaitedParent, te.Reason)
	require.Contains(t, err.Error(), "waits for it")

	complete(t, s, b, `"from b"`)
	requireReleasedWith(t, s, c, `["from a","from b"]`)
	gone, err := s.DeleteJob(ctx(t), a.ID)
	require.NoError(t, err)
	require.Equal(t, a.ID, gone.ID)
	requireGone(t, s, a.ID)
}

// testPruneSkipsWaitedParents: discarded workflow jobs a pending callback waits for (a batch whose
// other jobs still run) are kept by dead-letter pruning without using up its Limit, so the jobs
// after them are still pruned.
func testPruneSkipsWaitedParents(t *testing.T, s store.Store) {
	q := uniq("wf-prune")
	for range 3 {
		wf := uuidv7.New()
		failed := member(wf, q)
		running := member(wf, q)
		onDone := callback(wf, q, store.RunOnComplete, failed, running)
		insertWorkflow(t, s, wf, failed, running, onDone)
		fail(t, s, failed)
		run(t, s, running)
		time.Sleep(2 * time.Millisecond) // the waited ones finish first
	}
	plain := []string{inState(t, s, q, store.StateDiscarded).ID, inState(t, s, q, store.StateDiscarded).ID}
	later := time.Now().Add(time.Minute)
	cands, err := s.(store.DiscardedArchiver).PruneCandidates(ctx(t), store.PruneParams{Before: later, Limit: 2})
	require.NoError(t, err)
	require.ElementsMatch(t, plain, ids(cands), "the waited jobs are passed over, not counted")
	got, err := s.(store.DiscardedPruner).PruneDiscarded(ctx(t), store.PruneParams{Before: later, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, map[string]int{q: 2}, got)
	requireGone(t, s, plain...)
}

// testWorkflowRetryWaits: RetryJob of a workflow job whose parents have not all finished puts it
// back to pending, to be decided by their outcomes as if it had never left; one whose parents have
// all finished runs at once, with their results.
func testWorkflowRetryWaits(t *testing.T, s store.Store) {
	q, wf := uniq("wf-retry-waits"), uuidv7.New()
	a := member(wf, q)
	b := member(wf, q, a)
	c := member(wf, q, b)
	insertWorkflow(t, s, wf, a, b, c)
	aj := run(t, s, a)
	_, err := s.CancelJob(ctx(t), b.ID)
	require.NoError(t, err)
	requireState(t, s, store.StateCancelled, b, c)

	j, err := s.RetryJob(ctx(t), b.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatePending, j.State, "a retried step waits for its running parent")
	require.Zero(t, j.Attempt)
	requireState(t, s, store.StatePending, b)
	requireState(t, s, store.StateCancelled, c)
	requireWorkflow(t, getWorkflow(t, s, wf), store.WorkflowRunning, 3,
		map[store.State]int{store.StateActive: 1, store.StatePending: 1, store.StateCancelled: 1})
	claimed, err := s.Claim(ctx(t), store.ClaimParams{Queue: q, Limit: 10, WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err)
	require.Empty(t, claimed, "a pending step is not claimable")

	require.True(t, finish(t, s, store.Completion{ID: aj.ID, Attempt: aj.Attempt, State: store.StateCompleted,
		Result: json.RawMessage(`{"a":1}`)}))
	requireReleasedWith(t, s, b, `[{"a":1}]`)
	requireState(t, s, store.StateCancelled, c)

	// Parents that have all finished: the retried step runs now, with their results, even though it
	// was cancelled before they finished and so was never released.
	wf2 := uuidv7.New()
	x := member(wf2, q)
	y := member(wf2, q, x)
	insertWorkflow(t, s, wf2, x, y)
	_, err = s.CancelJob(ctx(t), y.ID)
	require.NoError(t, err)
	complete(t, s, x, `"x"`)
	requireState(t, s, store.StateCancelled, y)
	j, err = s.RetryJob(ctx(t), y.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.JSONEq(t, `["x"]`, string(j.ParentResults))
	requireReleasedWith(t, s, y, `["x"]`)

	// A failed parent does not stop an operator's retry once every parent has finished.
	wf3 := uuidv7.New()
	m := member(wf3, q)
	n := member(wf3, q, m)
	insertWorkflow(t, s, wf3, m, n)
	fail(t, s, m)
	requireState(t, s, store.StateCancelled, n)
	j, err = s.RetryJob(ctx(t), n.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	requireReleasedWith(t, s, n, `[null]`)

	// The same across queues (on a Redis Cluster, a parent in another slot).
	q2, wf4 := uniq("wf-retry-waits-2"), uuidv7.New()
	g := member(wf4, q)
	h := member(wf4, q2, g)
	insertWorkflow(t, s, wf4, g, h)
	gj := run(t, s, g)
	_, err = s.CancelJob(ctx(t), h.ID)
	require.NoError(t, err)
	j, err = s.RetryJob(ctx(t), h.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatePending, j.State, "a retried step waits for its running parent in another queue")
	require.True(t, finish(t, s, store.Completion{ID: gj.ID, Attempt: gj.Attempt, State: store.StateCompleted,
		Result: json.RawMessage(`"g"`)}))
	requireReleasedWith(t, s, h, `["g"]`)

	// A failed parent decides at once, as for a pending job: the retried step runs now although its
	// other parent still runs; a failure callback waits for every parent.
	wf5 := uuidv7.New()
	p1 := member(wf5, q)
	p2 := member(wf5, q)
	k := member(wf5, q, p1, p2)
	onFail := callback(wf5, q, store.RunOnFailure, p1, p2)
	insertWorkflow(t, s, wf5, p1, p2, k, onFail)
	run(t, s, p2)
	fail(t, s, p1)
	requireState(t, s, store.StateCancelled, k)
	requireState(t, s, store.StatePending, onFail)
	j, err = s.RetryJob(ctx(t), k.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "a failed parent lets the operator's retry run at once")
	_, err = s.CancelJob(ctx(t), onFail.ID)
	require.NoError(t, err)
	j, err = s.RetryJob(ctx(t), onFail.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatePending, j.State, "a failure callback waits for every parent")
}
