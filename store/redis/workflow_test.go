package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// wfRun claims p's job (by its kind) and returns it active.
func wfRun(t *testing.T, s *Store, p *store.InsertParams, lease time.Duration) *store.Job {
	t.Helper()
	jobs, err := s.Claim(context.Background(), store.ClaimParams{Queue: p.Queue, Kinds: []string{p.Kind}, Limit: 1,
		WorkerID: "w", LeaseDuration: lease})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "job %s is claimable", p.ID)
	require.Equal(t, p.ID, jobs[0].ID)
	return jobs[0]
}

// wfFinish runs p's job and ends it in state st (completed with result, or discarded).
func wfFinish(t *testing.T, s *Store, p *store.InsertParams, st store.State, result string) {
	t.Helper()
	j := wfRun(t, s, p, time.Minute)
	c := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: st}
	if result != "" {
		c.Result = json.RawMessage(result)
	}
	res, err := s.Finish(context.Background(), []store.Completion{c})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
}

// wfState requires the jobs of ps to be in state st.
func wfState(t *testing.T, s *Store, st store.State, ps ...*store.InsertParams) {
	t.Helper()
	for _, p := range ps {
		j, err := s.GetJob(context.Background(), p.ID)
		require.NoError(t, err)
		require.Equal(t, st, j.State, "job %s", p.ID)
	}
}

// wfReleased requires p's job to be available with the given parent results.
func wfReleased(t *testing.T, s *Store, p *store.InsertParams, parentResults string) {
	t.Helper()
	j, err := s.GetJob(context.Background(), p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "job %s is released", p.ID)
	require.JSONEq(t, parentResults, string(j.ParentResults))
}

// wfInsert inserts workflow wf of jobs and requires success.
func wfInsert(t *testing.T, s *Store, wf string, jobs ...*store.InsertParams) {
	t.Helper()
	w, _, err := s.InsertWorkflow(context.Background(), store.WorkflowParams{ID: wf, Name: "t", Type: "dag", Jobs: jobs})
	require.NoError(t, err)
	require.Equal(t, store.WorkflowRunning, w.State)
}

// wfGet reads a workflow and requires its state.
func wfGet(t *testing.T, s *Store, wf string, st store.WorkflowState) *store.Workflow {
	t.Helper()
	w, err := s.GetWorkflow(context.Background(), wf)
	require.NoError(t, err)
	require.Equal(t, st, w.State, "workflow %s", wf)
	return w
}

// inserts counts the insert notifications of each queue a store delivers.
type inserts struct {
	mu sync.Mutex
	n  map[string]int
}

func countInserts(t *testing.T, s *Store) *inserts {
	c := &inserts{n: map[string]int{}}
	t.Cleanup(s.Notifier().Subscribe(func(n store.Notification) {
		if n.Kind == store.NotifyInsert {
			c.mu.Lock()
			c.n[n.Queue]++
			c.mu.Unlock()
		}
	}))
	return c
}

func (c *inserts) of(q string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[q]
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queuesOnEachMaster returns three queues whose keys are served by the three masters of rdb.
func queuesOnEachMaster(t testing.TB, rdb *goredis.ClusterClient, s *Store) []string {
	t.Helper()
	ctx := context.Background()
	var byMaster map[string]string
	// The client's slot map comes from one node's view; until the cluster's gossip has settled it
	// can name fewer masters than serve slots: reload it until it names three.
	waitUntil(t, "the client's slot map to name the three masters", func() bool {
		byMaster = map[string]string{}
		for i := 0; len(byMaster) < 3 && i < 1000; i++ {
			q := fmt.Sprintf("q%d", i)
			node, err := rdb.MasterForKey(ctx, s.qkey(q))
			require.NoError(t, err)
			if _, ok := byMaster[node.Options().Addr]; !ok {
				byMaster[node.Options().Addr] = q
			}
		}
		if len(byMaster) < 3 {
			rdb.ReloadState(ctx)
		}
		return len(byMaster) == 3
	})
	var out []string
	for _, q := range byMaster {
		out = append(out, q)
	}
	return out
}

// TestClusterWorkflows runs workflows whose jobs share one queue on a local 3-master Redis Cluster,
// in queues served by each master (so at least two of them are not on the master of the global
// keys, where a script touching a global key would fail): a chain passing results, a group with
// callbacks, a DAG with parent results, a failure cascade, cascades by cancel and by the rescuer,
// cancelling the workflow, and cleanup (workflows spanning queues: TestClusterSplitWorkflows).
func TestClusterWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := clusterClient(t)
	s := clusterStore(t, rdb)
	queues := queuesOnEachMaster(t, rdb, s)
	got := countInserts(t, s)

	for _, q := range queues {
		t.Run(q, func(t *testing.T) {
			var wfs []string

			// Chain: each step gets its parent's result; the queue is announced at each release.
			wf := uuidv7.New()
			wfs = append(wfs, wf)
			a := storetest.WorkflowJob(wf, q)
			b := storetest.WorkflowJob(wf, q, a)
			c := storetest.WorkflowJob(wf, q, b)
			wfInsert(t, s, wf, a, b, c)
			ex, err := rdb.Exists(ctx, s.qkey(q)+"wf:"+wf, s.qkey(q)+"wfj:"+wf).Result()
			require.NoError(t, err)
			require.Equal(t, int64(2), ex, "the workflow's keys are tagged by its queue")
			ex, err = rdb.Exists(ctx, s.prefix+"wf:"+wf).Result()
			require.NoError(t, err)
			require.Zero(t, ex, "no global workflow key")
			idx, err := rdb.HGet(ctx, s.wfIndexKey(), wf).Result()
			require.NoError(t, err)
			require.Equal(t, q, idx, "the index names the workflow's queue")
			before := got.of(q)
			wfFinish(t, s, a, store.StateCompleted, `"ra"`)
			wfReleased(t, s, b, `["ra"]`)
			wfState(t, s, store.StatePending, c)
			waitUntil(t, "the released child's queue to be announced", func() bool { return got.of(q) > before })
			wfFinish(t, s, b, store.StateCompleted, `{"n":2}`)
			wfReleased(t, s, c, `[{"n":2}]`)
			wfFinish(t, s, c, store.StateCompleted, "")
			w := wfGet(t, s, wf, store.WorkflowCompleted)
			require.Equal(t, 3, w.Counts[store.StateCompleted])
			jobs, _, err := s.ListJobs(ctx, store.ListParams{WorkflowID: wf})
			require.NoError(t, err)
			require.Len(t, jobs, 3)

			// Group with callbacks: one member fails.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			g1, g2 := storetest.WorkflowJob(wf, q), storetest.WorkflowJob(wf, q)
			onOK := storetest.WorkflowCallback(wf, q, store.RunOnSuccess, g1, g2)
			onFail := storetest.WorkflowCallback(wf, q, store.RunOnFailure, g1, g2)
			onDone := storetest.WorkflowCallback(wf, q, store.RunOnComplete, g1, g2)
			wfInsert(t, s, wf, g1, g2, onOK, onFail, onDone)
			wfFinish(t, s, g1, store.StateCompleted, `1`)
			wfState(t, s, store.StatePending, onOK, onFail, onDone)
			wfFinish(t, s, g2, store.StateDiscarded, "")
			wfState(t, s, store.StateCancelled, onOK)
			wfReleased(t, s, onFail, `[1,null]`)
			wfReleased(t, s, onDone, `[1,null]`)
			w = wfGet(t, s, wf, store.WorkflowRunning) // its callbacks are still to run
			require.Equal(t, 2, w.Total, "callbacks are not members")
			wfFinish(t, s, onFail, store.StateCompleted, "")
			wfFinish(t, s, onDone, store.StateCompleted, "")
			w = wfGet(t, s, wf, store.WorkflowFailed)
			require.Equal(t, store.CallbackCounts{Total: 3, Completed: 2, Cancelled: 1}, w.Callbacks)

			// DAG: a diamond, parents' results in the child's parent order.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			d1 := storetest.WorkflowJob(wf, q)
			d2 := storetest.WorkflowJob(wf, q, d1)
			d3 := storetest.WorkflowJob(wf, q, d1)
			d4 := storetest.WorkflowJob(wf, q, d3, d2)
			wfInsert(t, s, wf, d1, d2, d3, d4)
			wfFinish(t, s, d1, store.StateCompleted, `"root"`)
			wfReleased(t, s, d2, `["root"]`)
			wfReleased(t, s, d3, `["root"]`)
			wfFinish(t, s, d2, store.StateCompleted, `"two"`)
			wfState(t, s, store.StatePending, d4)
			wfFinish(t, s, d3, store.StateCompleted, `"three"`)
			wfReleased(t, s, d4, `["three","two"]`)
			wfFinish(t, s, d4, store.StateCompleted, "")
			wfGet(t, s, wf, store.WorkflowCompleted)

			// Failure cascade: a failed root cancels its descendants.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			f1 := storetest.WorkflowJob(wf, q)
			f2 := storetest.WorkflowJob(wf, q, f1)
			f3 := storetest.WorkflowJob(wf, q, f2)
			wfInsert(t, s, wf, f1, f2, f3)
			wfFinish(t, s, f1, store.StateDiscarded, "")
			wfState(t, s, store.StateCancelled, f2, f3)
			w = wfGet(t, s, wf, store.WorkflowFailed)
			require.Equal(t, 2, w.Counts[store.StateCancelled])

			// CancelJob cascades, releasing a failure callback, whose queue is announced.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			k1 := storetest.WorkflowJob(wf, q)
			k2 := storetest.WorkflowJob(wf, q, k1)
			kcb := storetest.WorkflowCallback(wf, q, store.RunOnFailure, k1)
			wfInsert(t, s, wf, k1, k2, kcb)
			before = got.of(q)
			_, err = s.CancelJob(ctx, k1.ID)
			require.NoError(t, err)
			wfState(t, s, store.StateCancelled, k2)
			wfReleased(t, s, kcb, `[null]`)
			waitUntil(t, "the released callback's queue to be announced", func() bool { return got.of(q) > before })
			wfFinish(t, s, kcb, store.StateCompleted, "")

			// The rescuer's discard of a spent member cascades the same way.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			r1 := storetest.WorkflowJob(wf, q)
			r1.MaxAttempts = 1
			r2 := storetest.WorkflowJob(wf, q, r1)
			rcb := storetest.WorkflowCallback(wf, q, store.RunOnFailure, r1)
			wfInsert(t, s, wf, r1, r2, rcb)
			wfRun(t, s, r1, time.Millisecond)
			before = got.of(q)
			waitUntil(t, "the rescuer to discard the spent member", func() bool {
				res, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
				require.NoError(t, err)
				return len(res.Discarded) > 0
			})
			wfState(t, s, store.StateDiscarded, r1)
			wfState(t, s, store.StateCancelled, r2)
			wfReleased(t, s, rcb, `[null]`)
			waitUntil(t, "the rescue's released callback's queue to be announced", func() bool { return got.of(q) > before })
			wfFinish(t, s, rcb, store.StateCompleted, "")

			// CancelWorkflow cancels the running and the waiting members.
			wf = uuidv7.New()
			wfs = append(wfs, wf)
			m1 := storetest.WorkflowJob(wf, q)
			m2 := storetest.WorkflowJob(wf, q, m1)
			wfInsert(t, s, wf, m1, m2)
			running := wfRun(t, s, m1, time.Minute)
			w, _, err = s.CancelWorkflow(ctx, wf)
			require.NoError(t, err)
			require.Equal(t, store.WorkflowCancelled, w.State)
			wfState(t, s, store.StateCancelled, m1, m2)
			res, err := s.Finish(ctx, []store.Completion{{ID: running.ID, Attempt: 1, Token: running.ClaimToken,
				State: store.StateCompleted}})
			require.NoError(t, err)
			require.False(t, res[0].Applied, "the cancelled run's outcome is refused")

			listed, _, err := s.ListWorkflows(ctx, store.WorkflowListParams{Limit: 100})
			require.NoError(t, err)
			var ids []string
			for _, w := range listed {
				ids = append(ids, w.ID)
			}
			require.Subset(t, ids, wfs)

			// Cleanup removes every job of the finished workflows, and the workflows with them.
			for {
				n, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour),
					CancelledBefore: time.Now().Add(time.Hour), DiscardedBefore: time.Now().Add(time.Hour), Limit: 1000})
				require.NoError(t, err)
				if n == 0 {
					break
				}
			}
			for _, wf := range wfs {
				_, err := s.GetWorkflow(ctx, wf)
				require.ErrorIs(t, err, store.ErrNotFound, "cleaned-up workflow %s is gone", wf)
				ok, err := rdb.HExists(ctx, s.wfIndexKey(), wf).Result()
				require.NoError(t, err)
				require.False(t, ok, "and out of the workflow index")
				ex, err := rdb.Exists(ctx, s.qkey(q)+"wf:"+wf, s.qkey(q)+"wfj:"+wf).Result()
				require.NoError(t, err)
				require.Zero(t, ex)
			}
		})
	}

	// A writer dying between a workflow's two calls leaves nothing Cleanup does not undo.
	checkRegistrationSweep(t, s, queues[1])

	_, _, err := s.CancelWorkflow(ctx, uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound)
	// A rate limit a workflow's job brings is stored in its key's slot and holds its jobs.
	wf := uuidv7.New()
	l1, l2 := storetest.WorkflowJob(wf, queues[1]), storetest.WorkflowJob(wf, queues[1])
	for _, p := range []*store.InsertParams{l1, l2} {
		p.RateKey, p.RateLimit = "wf-key", &store.RateLimit{MaxActive: 1}
	}
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{l1, l2}})
	require.NoError(t, err)
	info, err := s.GetRateLimit(ctx, "wf-key")
	require.NoError(t, err)
	require.Equal(t, 1, info.Limit.MaxActive)
	require.Equal(t, int64(2), info.Waiting)
	limited, err := s.Claim(ctx, store.ClaimParams{Queue: queues[1], Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	n := 0
	for _, j := range limited {
		if j.RateKey == "wf-key" {
			n++
		}
	}
	require.Equal(t, 1, n, "the workflow's limit holds its jobs")
}

// insertOldLayout writes a workflow as the store did before workflows were tagged by their queue:
// its job ids in the id index, its keys global (<prefix>wf:<id>, wfj:<id>), its jobs without wfl,
// its id in the listing's index, and no entry in the workflow index.
func insertOldLayout(t *testing.T, s *Store, wf string, jobs ...*store.InsertParams) {
	t.Helper()
	ctx := context.Background()
	kids := map[string][]string{}
	reg := []any{}
	members := 0
	for _, jp := range jobs {
		for _, pid := range jp.ParentIDs {
			kids[pid] = append(kids[pid], jp.ID)
		}
		if jp.RunOn == "" {
			members++
		}
		reg = append(reg, jp.ID, jp.Queue)
		require.NoError(t, s.rdb.SAdd(ctx, s.queuesKey(), jp.Queue).Err())
	}
	require.NoError(t, ignoreNil(scriptRegisterIDs.Run(ctx, s.rdb, []string{s.idsKey()}, reg...).Err()))
	args := []any{wf, "old", "dag", "", "", members, len(jobs), "", "1"}
	for _, jp := range jobs {
		f := insertFields(jp, false)
		if k := kids[jp.ID]; len(k) > 0 {
			f = append(f, "kids", strings.Join(k, ","))
		}
		args = append(args, jp.Queue, jp.ID, jp.RateKey, "", len(f)/2)
		args = append(args, f...)
	}
	require.NoError(t, scriptInsertWorkflow.Run(ctx, s.rdb, []string{s.prefix}, args...).Err())
	require.NoError(t, s.rdb.ZAdd(ctx, s.workflowsKey(), goredis.Z{Member: wf}).Err())
	ex, err := s.rdb.Exists(ctx, s.prefix+"wf:"+wf, s.prefix+"wfj:"+wf).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), ex)
	ok, err := s.rdb.HExists(ctx, s.wfIndexKey(), wf).Result()
	require.NoError(t, err)
	require.False(t, ok)
}

// TestWorkflowOldLayout: workflows written before workflows were tagged by their queue (global keys,
// no workflow index entry) are still read, listed, run, cancelled and cleaned up after the upgrade,
// with no migration, and their ids stay taken.
func TestWorkflowOldLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	got := countInserts(t, s)
	q, q2 := "old-"+uuidv7.New()[24:], "old2-"+uuidv7.New()[24:]

	// A chain in one queue.
	wf := uuidv7.New()
	a := storetest.WorkflowJob(wf, q)
	b := storetest.WorkflowJob(wf, q, a)
	c := storetest.WorkflowJob(wf, q, b)
	insertOldLayout(t, s, wf, a, b, c)
	w := wfGet(t, s, wf, store.WorkflowRunning)
	require.Equal(t, 3, w.Total)
	require.Equal(t, 1, w.Counts[store.StateAvailable])
	jobs, _, err := s.ListJobs(ctx, store.ListParams{WorkflowID: wf})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	listed, _, err := s.ListWorkflows(ctx, store.WorkflowListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, wf, listed[0].ID)

	// Its id stays taken, whatever layout a new workflow with it would have.
	dup := storetest.WorkflowJob(wf, q)
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{dup}})
	require.ErrorIs(t, err, store.ErrDuplicate, "a single-queue workflow with an old workflow's id")
	dup2 := storetest.WorkflowJob(wf, q2, dup)
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{dup, dup2}})
	require.ErrorIs(t, err, store.ErrDuplicate, "a multi-queue workflow with an old workflow's id")
	for _, id := range []string{dup.ID, dup2.ID} {
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	ok, err := s.rdb.HExists(ctx, s.wfIndexKey(), wf).Result()
	require.NoError(t, err)
	require.False(t, ok, "a refused duplicate leaves no index entry")

	before := got.of(q)
	wfFinish(t, s, a, store.StateCompleted, `"a"`)
	wfReleased(t, s, b, `["a"]`)
	waitUntil(t, "the released child's queue to be announced", func() bool { return got.of(q) > before })
	wfFinish(t, s, b, store.StateCompleted, `"b"`)
	wfReleased(t, s, c, `["b"]`)
	wfFinish(t, s, c, store.StateCompleted, "")
	wfGet(t, s, wf, store.WorkflowCompleted)

	// One spanning two queues: a failed root cancels its child in the other queue.
	wf2 := uuidv7.New()
	x := storetest.WorkflowJob(wf2, q)
	y := storetest.WorkflowJob(wf2, q2, x)
	insertOldLayout(t, s, wf2, x, y)
	wfFinish(t, s, x, store.StateDiscarded, "")
	wfState(t, s, store.StateCancelled, y)
	wfGet(t, s, wf2, store.WorkflowFailed)

	// One cancelled as a whole.
	wf3 := uuidv7.New()
	m := storetest.WorkflowJob(wf3, q)
	n := storetest.WorkflowJob(wf3, q2, m)
	insertOldLayout(t, s, wf3, m, n)
	w, _, err = s.CancelWorkflow(ctx, wf3)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, w.State)
	wfState(t, s, store.StateCancelled, m, n)

	// Cleanup removes them with their last jobs.
	cut := time.Now().Add(time.Hour)
	_, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: cut, CancelledBefore: cut, DiscardedBefore: cut, Limit: 1000})
	require.NoError(t, err)
	for _, id := range []string{wf, wf2, wf3} {
		_, err = s.GetWorkflow(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		ex, err := s.rdb.Exists(ctx, s.prefix+"wf:"+id, s.prefix+"wfj:"+id).Result()
		require.NoError(t, err)
		require.Zero(t, ex)
	}
	listed, _, err = s.ListWorkflows(ctx, store.WorkflowListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, listed)
	// The id is free again once the old workflow is gone: a new one takes the queue's layout.
	again := storetest.WorkflowJob(wf, q)
	wfInsert(t, s, wf, again)
	idx, err := s.rdb.HGet(ctx, s.wfIndexKey(), wf).Result()
	require.NoError(t, err)
	require.Equal(t, q, idx)
}

// TestWorkflowLayout: on a single node, a workflow in one queue is tagged by it and indexed by its
// queue; one spanning queues keeps global keys, indexed as such ("").
func TestWorkflowLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	q, q2 := "lay-a", "lay-b"
	one := uuidv7.New()
	a := storetest.WorkflowJob(one, q)
	wfInsert(t, s, one, a, storetest.WorkflowJob(one, q, a))
	ex, err := s.rdb.Exists(ctx, s.qkey(q)+"wf:"+one, s.qkey(q)+"wfj:"+one).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), ex)
	wfl, err := s.rdb.HGet(ctx, s.jobKey(q, a.ID), "wfl").Result()
	require.NoError(t, err)
	require.Equal(t, "1", wfl, "its jobs are marked")

	span := uuidv7.New()
	x := storetest.WorkflowJob(span, q)
	wfInsert(t, s, span, x, storetest.WorkflowJob(span, q2, x))
	ex, err = s.rdb.Exists(ctx, s.prefix+"wf:"+span, s.prefix+"wfj:"+span).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), ex)
	idx, err := s.rdb.HMGet(ctx, s.wfIndexKey(), one, span).Result()
	require.NoError(t, err)
	require.Equal(t, []any{q, ""}, idx)

	// A workflow id is one across layouts.
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: one, Jobs: []*store.InsertParams{storetest.WorkflowJob(one, q), storetest.WorkflowJob(one, q2)}})
	require.ErrorIs(t, err, store.ErrDuplicate)
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: span, Jobs: []*store.InsertParams{storetest.WorkflowJob(span, q)}})
	require.ErrorIs(t, err, store.ErrDuplicate)
}

// checkRegistrationSweep simulates writers of workflows in queue q that died: one after registering
// its workflow and jobs, before writing them (the registration is then undone by Cleanup, freeing
// the ids), one after writing its workflow, before ending its registration (the workflow stays).
func checkRegistrationSweep(t *testing.T, s *Store, q string) {
	t.Helper()
	ctx := context.Background()
	keys := s.wfRegKeys()
	dead := uuidv7.New()
	a := storetest.WorkflowJob(dead, q)
	b := storetest.WorkflowJob(dead, q, a)
	require.NoError(t, ignoreNil(scriptRegisterWorkflow.Run(ctx, s.rdb, keys, dead, q, a.ID, q, b.ID, q).Err()))
	_, err := s.GetWorkflow(ctx, dead)
	require.ErrorIs(t, err, store.ErrNotFound, "a registered workflow never written reads as not found")
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: dead, Jobs: []*store.InsertParams{a, b}})
	require.ErrorIs(t, err, store.ErrDuplicate, "its id is taken while its registration is pending")

	kept := uuidv7.New()
	k := storetest.WorkflowJob(kept, q)
	wfInsert(t, s, kept, k)
	require.NoError(t, s.rdb.HSet(ctx, keys[3], kept, `["`+k.ID+`"]`).Err())

	// Cleanup undoes only registrations older than pendingGrace: age both.
	for _, id := range []string{dead, kept} {
		require.NoError(t, s.rdb.ZAdd(ctx, keys[2], goredis.Z{Score: 1, Member: id}).Err())
	}
	_, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now(), Limit: 10})
	require.NoError(t, err)
	n, err := s.rdb.ZCard(ctx, keys[2]).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no registration is pending any more")
	n, err = s.rdb.HLen(ctx, keys[3]).Result()
	require.NoError(t, err)
	require.Zero(t, n)
	ok, err := s.rdb.HExists(ctx, keys[1], dead).Result()
	require.NoError(t, err)
	require.False(t, ok, "the dead writer's index entry is gone")
	ok, err = s.rdb.HExists(ctx, keys[0], a.ID).Result()
	require.NoError(t, err)
	require.False(t, ok, "and its jobs' ids")
	wfGet(t, s, kept, store.WorkflowRunning)
	_, err = s.GetJob(ctx, k.ID)
	require.NoError(t, err, "a written workflow's job ids stay")
	wfInsert(t, s, dead, a, b)
	wfGet(t, s, dead, store.WorkflowRunning)
}

// TestWorkflowRegistrationSweep: see checkRegistrationSweep (single node; TestClusterWorkflows runs
// it on a cluster).
func TestWorkflowRegistrationSweep(t *testing.T) {
	t.Parallel()
	checkRegistrationSweep(t, newTestStore(t), "sweep")
}
