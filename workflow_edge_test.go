package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

// wfEdgeStep is a workflow step whose worker does what its args say: record Result, or, in mode
// "block", wait until the rig releases it.
type wfEdgeStep struct {
	Name   string `json:"name"`
	Mode   string `json:"mode"`
	Result string `json:"result,omitempty"`
}

func (wfEdgeStep) Kind() string { return "wfedge.step" }

// wfEdgeRig is a started client whose worker runs wfEdgeStep and records what each step saw.
type wfEdgeRig struct {
	c       *pronto.Client
	mu      sync.Mutex
	started map[string]int
	release chan struct{}
}

func newWFEdgeRig(t *testing.T, ts *testStore) *wfEdgeRig {
	r := &wfEdgeRig{started: map[string]int{}, release: make(chan struct{})}
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfEdgeStep]) error {
		r.mu.Lock()
		r.started[j.Args.Name]++
		r.mu.Unlock()
		if j.Args.Mode == "block" {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.release:
			}
		}
		if j.Args.Result != "" {
			return pronto.RecordResult(ctx, json.RawMessage(j.Args.Result))
		}
		return nil
	}))
	r.c = startClient(t, ts.Store, fastConfig(workers, defaultQueue(20)))
	return r
}

func wfJob(name, mode, result string) pronto.WorkflowJob {
	return pronto.WorkflowJob{Args: wfEdgeStep{Name: name, Mode: mode, Result: result}}
}

func wfEdgeHTTP(t *testing.T, h http.Handler, method, path string, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m
}

func newWFEdgeServer(t *testing.T, ts *testStore) (*server.Server, *pronto.Client) {
	c, err := pronto.NewClient(ts.Store, &pronto.Config{RescueInterval: 100 * time.Millisecond, LeaderTTL: time.Second})
	require.NoError(t, err)
	startBuilt(t, c)
	s, err := server.New(server.Config{Client: c})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

func stepsOf(m map[string]any) []map[string]any {
	var out []map[string]any
	wf, _ := m["workflow"].(map[string]any)
	steps, _ := wf["steps"].([]any)
	for _, s := range steps {
		out = append(out, s.(map[string]any))
	}
	return out
}

// TestWorkflowStepsOrderWithJobIDs: GET /ojs/v1/workflows/{id} answers a chain's steps in creation
// order under their positions, as the create did, also when the steps were given job ids out of
// that order (the store lists jobs in id order). It used to name them by their place in id order.
func TestWorkflowStepsOrderWithJobIDs(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		s, _ := newWFEdgeServer(t, ts)
		early, late := uuidv7.New(), uuidv7.New()
		// Step 0 gets the later id, step 1 the earlier one.
		body := `{"type":"chain","name":"ids","steps":[` +
			`{"type":"wfedge.step","args":[],"id":"` + late + `"},` +
			`{"type":"wfedge.step","args":[],"id":"` + early + `"}],` +
			`"callbacks":{"on_complete":{"type":"wfedge.step","args":[]}}}`
		code, m := wfEdgeHTTP(t, s, "POST", "/ojs/v1/workflows", body)
		require.Equal(t, 201, code, "%v", m)
		wid := m["workflow"].(map[string]any)["id"].(string)
		type step struct{ ID, JobID, State, Deps string }
		read := func(m map[string]any) []step {
			var out []step
			for _, st := range stepsOf(m) {
				out = append(out, step{fmt.Sprint(st["id"]), fmt.Sprint(st["job_id"]), fmt.Sprint(st["state"]), fmt.Sprint(st["depends_on"])})
			}
			return out
		}
		created := read(m)
		require.Len(t, created, 3)
		require.Equal(t, step{"0", late, "available", "[]"}, created[0], "the create answer")
		require.Equal(t, step{"1", early, "pending", "[0]"}, created[1], "the create answer")

		code, m = wfEdgeHTTP(t, s, "GET", "/ojs/v1/workflows/"+wid, "")
		require.Equal(t, 200, code)
		got := read(m)
		require.Len(t, got, 3)
		assert.Equal(t, created[0], got[0], "step 0 of GET /ojs/v1/workflows/{id}")
		assert.Equal(t, created[1], got[1], "step 1 of GET /ojs/v1/workflows/{id}")
	})
}

// TestMemoryBoundKeepsWaitedSteps: the memory store's bound on finished jobs (WithMaxFinished)
// keeps a finished workflow step that a pending step still waits for, as retention does; it used
// to delete it, and the workflow's step count shrank while it ran.
func TestMemoryBoundKeepsWaitedSteps(t *testing.T) {
	ts := &testStore{Store: memory.New(memory.WithMaxFinished(2)), kind: kindMemory}
	r := newWFEdgeRig(t, ts)
	ctx := context.Background()
	wf := pronto.NewWorkflow("bound").
		AddJob("a", wfJob("a", "", `"a"`)).AddJob("b", wfJob("b", "", `"b"`)).AddJob("c", wfJob("c", "", `"c"`)).
		AddJob("d", wfJob("d", "block", `"d"`)).
		AddJob("sink", wfJob("sink", "", ""), "a", "b", "c", "d")
	res, err := r.c.WorkflowInsert(ctx, wf)
	require.NoError(t, err)
	defer close(r.release)
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.started["a"] == 1 && r.started["b"] == 1 && r.started["c"] == 1 && r.started["d"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a, b and c complete; d runs; sink waits for all four
	sink, err := r.c.JobGet(ctx, res.Jobs["sink"].ID)
	require.NoError(t, err)
	require.Equal(t, pronto.StatePending, sink.State)
	for _, n := range []string{"a", "b", "c"} {
		j, err := r.c.JobGet(ctx, res.Jobs[n].ID)
		if assert.NoError(t, err, "step %s, which the pending sink waits for", n) {
			assert.Equal(t, pronto.StateCompleted, j.State)
		}
	}
	info, err := r.c.WorkflowGet(ctx, wf.ID())
	require.NoError(t, err)
	assert.Equal(t, 5, info.Total, "steps of the running workflow")
}

// TestWorkflowRepeatedParent: a step naming the same parent twice is refused as invalid input on
// every store. SQLite used to fail with its edge table's raw UNIQUE error, the others stored it.
func TestWorkflowRepeatedParent(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		wf := pronto.NewWorkflow("dup").AddJob("a", wfJob("a", "", "")).AddJob("b", wfJob("b", "", ""), "a", "a")
		_, err = c.WorkflowInsert(context.Background(), wf)
		assert.ErrorIs(t, err, pronto.ErrInvalidArgs, "a refused workflow is invalid input, the same on every store")
	})
}
