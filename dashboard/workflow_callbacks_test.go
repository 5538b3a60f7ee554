package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

type cbNoop struct{}

func (cbNoop) Kind() string { return "dashboard.cbnoop" }

// runOneJob claims the one available job of the default queue and finishes it in state st.
func runOneJob(t *testing.T, s store.Store, st store.State) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	var jobs []*store.Job
	for len(jobs) == 0 {
		var err error
		if jobs, err = s.Claim(ctx, store.ClaimParams{Queue: pronto.DefaultQueue, Limit: 10, WorkerID: "dashboard-test", LeaseDuration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 && time.Now().After(deadline) {
			t.Fatal("no job to claim")
		}
	}
	j := jobs[0]
	c := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: st}
	if st == store.StateDiscarded {
		c.Error = &store.AttemptError{Attempt: j.Attempt, At: time.Now(), Message: "callback failed for good"}
	}
	res, err := s.Finish(ctx, []store.Completion{c})
	if err != nil || !res[0].Applied {
		t.Fatalf("finish %s: %v %+v", j.ID, err, res)
	}
}

type callbackCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Cancelled int `json:"cancelled"`
	Discarded int `json:"discarded"`
	Open      int `json:"open"`
}

type shownWorkflow struct {
	ID        string          `json:"id"`
	State     string          `json:"state"`
	Total     int             `json:"total"`
	Counts    map[string]int  `json:"counts"`
	Callbacks *callbackCounts `json:"callbacks"`
}

// TestWorkflowViewShowsCallbacks: a workflow's state follows its callbacks (running until they
// end, failed when one is discarded), so the workflow list and page carry their counts; without
// them a batch whose every step completed is shown running with nothing left to do, then failed
// with no step failed.
func TestWorkflowViewShowsCallbacks(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	c, err := pronto.NewClient(s, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })

	wf := pronto.NewWorkflow("with-callback").
		Add("a", cbNoop{}, nil).
		OnSuccess(pronto.WorkflowJob{Args: cbNoop{}, Opts: &pronto.InsertOpts{MaxAttempts: 1}})
	if _, err := c.WorkflowInsert(ctx, wf); err != nil {
		t.Fatal(err)
	}

	// shown reads the workflow from its page and from the list; both must agree.
	shown := func(t *testing.T) []shownWorkflow {
		t.Helper()
		var views []shownWorkflow
		for _, path := range []string{"/api/workflows/" + wf.ID(), "/api/workflows"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
			}
			var out struct {
				Workflow  *shownWorkflow  `json:"workflow"`
				Workflows []shownWorkflow `json:"workflows"`
			}
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			if out.Workflow == nil {
				if len(out.Workflows) != 1 {
					t.Fatalf("GET %s: %d workflows, want 1: %s", path, len(out.Workflows), body)
				}
				out.Workflow = &out.Workflows[0]
			}
			if out.Workflow.Callbacks == nil {
				t.Fatalf("GET %s: the workflow is shown without its callbacks: %s", path, body)
			}
			views = append(views, *out.Workflow)
		}
		return views
	}

	runOneJob(t, s, store.StateCompleted) // the step
	for _, v := range shown(t) {
		if v.State != "running" || v.Counts["completed"] != 1 || v.Total != 1 {
			t.Fatalf("every step completed, callback not run: shown %+v, want running with its one step completed", v)
		}
		if want := (callbackCounts{Total: 1, Open: 1}); *v.Callbacks != want {
			t.Errorf("every step completed, callback not run: callbacks %+v, want %+v (the one open callback it waits on)", *v.Callbacks, want)
		}
	}

	runOneJob(t, s, store.StateDiscarded) // its on_success callback
	for _, v := range shown(t) {
		if v.State != "failed" || v.Counts["completed"] != 1 || v.Counts["discarded"] != 0 {
			t.Fatalf("callback discarded: shown %+v, want failed with its one step completed", v)
		}
		if want := (callbackCounts{Total: 1, Discarded: 1}); *v.Callbacks != want {
			t.Errorf("callback discarded: callbacks %+v, want %+v (the failure the steps do not show)", *v.Callbacks, want)
		}
	}
}
