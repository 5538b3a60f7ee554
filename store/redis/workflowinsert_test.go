package redis

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// cancelAfter is a go-redis hook that, the first time a command or pipeline calls the store's
// function fn once armed, lets it run, then cancels the caller's context and reports the call as
// cancelled: what a caller sees when its context ends while the reply is on its way.
type cancelAfter struct {
	fn     string
	cancel atomic.Pointer[context.CancelFunc]
	fired  atomic.Bool
}

func (h *cancelAfter) arm(cancel context.CancelFunc) { h.fired.Store(false); h.cancel.Store(&cancel) }

func (h *cancelAfter) calls(cmd goredis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && a[0] == "fcall" && a[1] == h.fn
}

// hit reports whether the armed hook fires for cmds, disarming it.
func (h *cancelAfter) hit(cmds ...goredis.Cmder) bool {
	for _, c := range cmds {
		if h.calls(c) {
			if cancel := h.cancel.Swap(nil); cancel != nil {
				(*cancel)()
				h.fired.Store(true)
				return true
			}
		}
	}
	return false
}

func (h *cancelAfter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *cancelAfter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if h.hit(cmd) {
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return err
	}
}

func (h *cancelAfter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if h.hit(cmds...) {
			for _, c := range cmds {
				c.SetErr(context.Canceled)
			}
			return context.Canceled
		}
		return err
	}
}

// checkCancelledWorkflowInserts inserts workflows (each of jobs(wf)) whose caller's context ends
// just after each step of the insert ran in Redis (stages: the functions called), and requires the
// insert whole or undone at once: no registration left pending for Cleanup, and either the
// workflow is stored (found, listed, its jobs found; a retry says duplicate) or nothing of it is
// (not found, no job, and a retry with the same ids stores it).
func checkCancelledWorkflowInserts(t *testing.T, s *Store, rdb goredis.UniversalClient, jobs func(wf string) []*store.InsertParams, stages ...string) {
	t.Helper()
	hooks := map[string]*cancelAfter{}
	for _, st := range stages {
		h := &cancelAfter{fn: luaFuncNamed(t, st).fname()}
		hooks[st] = h
		rdb.AddHook(h)
	}
	bg := context.Background()
	for _, st := range stages {
		t.Run(st, func(t *testing.T) {
			wf := uuidv7.New()
			p := store.WorkflowParams{ID: wf, Name: "cancelled", Jobs: jobs(wf)}
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			hooks[st].arm(cancel)
			_, _, err := s.InsertWorkflow(ctx, p)
			require.True(t, hooks[st].fired.Load(), "the insert called %s", st)
			zerr := rdb.ZScore(bg, s.wfRegKeys()[2], wf).Err()
			require.ErrorIs(t, zerr, goredis.Nil, "the registration is left pending (until Cleanup, 10 minutes later); insert error: %v", err)

			w, gerr := s.GetWorkflow(bg, wf)
			if errors.Is(gerr, store.ErrNotFound) {
				require.Error(t, err, "the insert reported success for a workflow not stored")
				for _, jp := range p.Jobs {
					_, jerr := s.GetJob(bg, jp.ID)
					require.ErrorIs(t, jerr, store.ErrNotFound, "a job of the workflow not stored is (%v)", err)
					ex, xerr := rdb.Exists(bg, s.jobKey(jp.Queue, jp.ID)).Result()
					require.NoError(t, xerr)
					require.Zero(t, ex, "job %s of the workflow not stored is left in its queue", jp.ID)
				}
				_, _, err = s.InsertWorkflow(bg, p)
				require.NoError(t, err, "a retry of the insert with the same ids")
				w, gerr = s.GetWorkflow(bg, wf)
			} else {
				_, _, rerr := s.InsertWorkflow(bg, p)
				require.ErrorIs(t, rerr, store.ErrDuplicate, "a retry of a stored workflow")
			}
			require.NoError(t, gerr)
			require.Equal(t, len(p.Jobs), w.Total)
			for _, jp := range p.Jobs {
				_, jerr := s.GetJob(bg, jp.ID)
				require.NoError(t, jerr, "a job of the stored workflow")
			}
			listed, lerr := rdb.ZScore(bg, s.workflowsKey(), wf).Result()
			require.NoError(t, lerr, "the stored workflow is listed")
			require.Zero(t, listed)
		})
	}
}

// luaFuncNamed returns the store's function of that name.
func luaFuncNamed(t *testing.T, name string) *luaFunc {
	t.Helper()
	for _, f := range []*luaFunc{scriptRegisterWorkflow, scriptInsertWorkflow, scriptReleaseHeld, scriptSettleRegistrations} {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no function %s", name)
	return nil
}

// chainIn returns the jobs of a workflow wf that chains one job in each of queues, two in the
// queue when there is one.
func chainIn(queues ...string) func(wf string) []*store.InsertParams {
	return func(wf string) []*store.InsertParams {
		if len(queues) == 1 {
			queues = append(queues, queues[0])
		}
		var out []*store.InsertParams
		for i, q := range queues {
			if i == 0 {
				out = append(out, storetest.WorkflowJob(wf, q))
			} else {
				out = append(out, storetest.WorkflowJob(wf, q, out[i-1]))
			}
		}
		return out
	}
}

// TestWorkflowInsertCancelled: an InsertWorkflow whose context ends after any of its steps ran in
// Redis is undone at once or stored whole (checkCancelledWorkflowInserts), for a workflow in one
// queue and one spanning queues, on a single node (TestClusterWorkflowInsertCancelled: on a
// cluster).
func TestWorkflowInsertCancelled(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	stages := []string{"RegisterWorkflow", "InsertWorkflow", "SettleRegistrations"}
	t.Run("one queue", func(t *testing.T) {
		checkCancelledWorkflowInserts(t, s, s.rdb, chainIn("wfc"), stages...)
	})
	t.Run("spanning queues", func(t *testing.T) {
		checkCancelledWorkflowInserts(t, s, s.rdb, chainIn("wfc1", "wfc2"), stages...)
	})
}

// TestClusterWorkflowInsertCancelled: TestWorkflowInsertCancelled on a 3-master Redis Cluster,
// where a workflow spanning queues is written as one part per queue, then released.
func TestClusterWorkflowInsertCancelled(t *testing.T) {
	t.Parallel()
	rdb, s, queues := migratedCluster(t)
	t.Run("one queue", func(t *testing.T) {
		checkCancelledWorkflowInserts(t, s, rdb, chainIn(queues[0]), "RegisterWorkflow", "InsertWorkflow", "SettleRegistrations")
	})
	t.Run("spanning queues", func(t *testing.T) {
		checkCancelledWorkflowInserts(t, s, rdb, chainIn(queues[0], queues[1], queues[2]),
			"RegisterWorkflow", "InsertWorkflow", "ReleaseHeld", "SettleRegistrations")
	})
}
