package redis

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// requireOutboxesEmpty requires the workflow outboxes of queues to come to hold nothing (every
// outcome relayed; Finish removes the entries it delivered in the background).
func requireOutboxesEmpty(t *testing.T, s *Store, queues ...string) {
	t.Helper()
	for _, q := range queues {
		waitUntil(t, "queue "+q+"'s outbox to be empty", func() bool {
			n, err := s.rdb.LLen(context.Background(), s.outboxKey(q)).Result()
			require.NoError(t, err)
			return n == 0
		})
	}
}

// TestClusterSplitWorkflows runs workflows whose jobs span the queues of a local 3-master Redis
// Cluster (one queue per master): a diamond passing results between queues, with a child in its
// parent's own queue beside; a failure cascading through two queues to a failure callback in a
// third; cancelling the workflow; and cleanup, which keeps the workflow while any part is left.
func TestClusterSplitWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := clusterClient(t)
	s := clusterStore(t, rdb)
	qs := queuesOnEachMaster(t, rdb, s)
	got := countInserts(t, s)

	// The diamond a -> (b, c) -> d, a in qs[0], b in qs[1], c in qs[2], d in qs[0]; e, a's child in
	// its own queue.
	wf := uuidv7.New()
	a := storetest.WorkflowJob(wf, qs[0])
	b := storetest.WorkflowJob(wf, qs[1], a)
	c := storetest.WorkflowJob(wf, qs[2], a)
	d := storetest.WorkflowJob(wf, qs[0], b, c)
	e := storetest.WorkflowJob(wf, qs[0], a)
	wfInsert(t, s, wf, a, b, c, d, e)
	idx, err := rdb.HGet(ctx, s.wfIndexKey(), wf).Result()
	require.NoError(t, err)
	require.Equal(t, qs, splitQueues(idx), "the index names the workflow's queues")
	for _, q := range qs {
		ex, err := rdb.Exists(ctx, s.qkey(q)+"wf:"+wf).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), ex, "a part in queue %s, its own slot", q)
	}
	wfState(t, s, store.StateAvailable, a)
	wfState(t, s, store.StatePending, b, c, d, e)
	held, err := rdb.HExists(ctx, s.jobKey(qs[0], a.ID), "hold").Result()
	require.NoError(t, err)
	require.False(t, held, "the root is released once every part is written")
	w := wfGet(t, s, wf, store.WorkflowRunning)
	require.Equal(t, 5, w.Total, "the parts' counts are summed")
	require.Equal(t, 4, w.Counts[store.StatePending])
	jobs, _, err := s.ListJobs(ctx, store.ListParams{WorkflowID: wf})
	require.NoError(t, err)
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	require.Equal(t, []string{a.ID, b.ID, c.ID, d.ID, e.ID}, ids, "the parts' jobs, merged in id order")

	before1, before2 := got.of(qs[1]), got.of(qs[2])
	wfFinish(t, s, a, store.StateCompleted, `"ra"`)
	wfReleased(t, s, b, `["ra"]`)
	wfReleased(t, s, c, `["ra"]`)
	wfReleased(t, s, e, `["ra"]`)
	wfState(t, s, store.StatePending, d)
	waitUntil(t, "the children's queues to be announced", func() bool {
		return got.of(qs[1]) > before1 && got.of(qs[2]) > before2
	})
	wfFinish(t, s, b, store.StateCompleted, `"rb"`)
	wfState(t, s, store.StatePending, d)
	wfFinish(t, s, c, store.StateCompleted, `{"c":3}`)
	wfReleased(t, s, d, `["rb",{"c":3}]`)
	wfFinish(t, s, d, store.StateCompleted, "")
	wfFinish(t, s, e, store.StateCompleted, "")
	w = wfGet(t, s, wf, store.WorkflowCompleted)
	require.Equal(t, 5, w.Counts[store.StateCompleted])
	require.False(t, w.FinishedAt.Before(w.CreatedAt))
	requireOutboxesEmpty(t, s, qs...)

	// A failure cascades through two queues: x (qs[0]) fails, so y (qs[1]) is cancelled, so z
	// (qs[2]) is, and the failure callback f (qs[2]) runs with x's outcome.
	wf2 := uuidv7.New()
	x := storetest.WorkflowJob(wf2, qs[0])
	y := storetest.WorkflowJob(wf2, qs[1], x)
	z := storetest.WorkflowJob(wf2, qs[2], y)
	f := storetest.WorkflowCallback(wf2, qs[2], store.RunOnFailure, x)
	wfInsert(t, s, wf2, x, y, z, f)
	wfFinish(t, s, x, store.StateDiscarded, "")
	wfState(t, s, store.StateCancelled, y, z)
	wfReleased(t, s, f, `[null]`)
	wfGet(t, s, wf2, store.WorkflowRunning) // until its callback, in another part, has run
	wfFinish(t, s, f, store.StateCompleted, "")
	w = wfGet(t, s, wf2, store.WorkflowFailed)
	require.Equal(t, store.CallbackCounts{Total: 1, Completed: 1}, w.Callbacks, "the parts' callback counts merged")
	requireOutboxesEmpty(t, s, qs...)

	// Cancelling the workflow cancels every part.
	wf3 := uuidv7.New()
	m := storetest.WorkflowJob(wf3, qs[1])
	n := storetest.WorkflowJob(wf3, qs[2], m)
	o := storetest.WorkflowJob(wf3, qs[0], m, n)
	wfInsert(t, s, wf3, m, n, o)
	wfRun(t, s, m, time.Minute)
	w, _, err = s.CancelWorkflow(ctx, wf3)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, w.State)
	require.Equal(t, 3, w.Counts[store.StateCancelled])
	wfState(t, s, store.StateCancelled, m, n, o)
	requireOutboxesEmpty(t, s, qs...)

	// Deleting one part's jobs leaves the workflow (its other parts); cleanup removes the rest.
	for _, p := range []*store.InsertParams{b} {
		_, err := s.DeleteJob(ctx, p.ID)
		require.NoError(t, err)
	}
	ex, err := rdb.Exists(ctx, s.qkey(qs[1])+"wf:"+wf).Result()
	require.NoError(t, err)
	require.Zero(t, ex, "the part of qs[1] went with its last job")
	w = wfGet(t, s, wf, store.WorkflowCompleted)
	require.Equal(t, 4, w.Total)
	cut := time.Now().Add(time.Hour)
	_, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: cut, CancelledBefore: cut, DiscardedBefore: cut, Limit: 1000})
	require.NoError(t, err)
	for _, id := range []string{wf, wf2, wf3} {
		_, err = s.GetWorkflow(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		ok, err := rdb.HExists(ctx, s.wfIndexKey(), id).Result()
		require.NoError(t, err)
		require.False(t, ok, "workflow %s is out of the index with its last part", id)
		for _, q := range qs {
			ex, err := rdb.Exists(ctx, s.qkey(q)+"wf:"+id, s.qkey(q)+"wfj:"+id).Result()
			require.NoError(t, err)
			require.Zero(t, ex)
		}
	}
	listed, _, err := s.ListWorkflows(ctx, store.WorkflowListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, listed)
}

// finishUnrelayed completes job j as a process that died right after its outcome would: the
// Finish script runs, and nothing relays its workflow outbox. It returns the script's code.
func finishUnrelayed(t *testing.T, s *Store, j *store.Job, result string) int64 {
	t.Helper()
	out, err := scriptFinish.Run(context.Background(), s.rdb, s.keys(j.Queue), 1,
		j.ID, fmt.Sprint(j.Attempt), j.ClaimToken, string(store.StateCompleted), "0", "", "v", result).Slice()
	require.NoError(t, err)
	require.Len(t, out, 3, "the code, the marker and the one entry written")
	require.Equal(t, relayMarker, out[1])
	code, _ := out[0].(int64)
	return code
}

// TestClusterSplitWorkflowRelay: an outcome whose relay was never made (its process died after
// writing it) waits in its queue's outbox, and any process's Rescue delivers it; delivering an
// entry again changes nothing; a child with parents in several queues, finished at once by several
// clients, is released once, with every parent's result.
func TestClusterSplitWorkflowRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := clusterClient(t)
	s := clusterStore(t, rdb)
	other := clusterStore(t, rdb) // another process
	qs := queuesOnEachMaster(t, rdb, s)

	wf := uuidv7.New()
	a := storetest.WorkflowJob(wf, qs[0])
	b := storetest.WorkflowJob(wf, qs[1], a)
	wfInsert(t, s, wf, a, b)
	code := finishUnrelayed(t, s, wfRun(t, s, a, time.Minute), `"ra"`)
	require.Equal(t, int64(3), code, "the script asks its caller to relay")
	wfState(t, s, store.StateCompleted, a)
	wfState(t, s, store.StatePending, b)
	entries, err := rdb.LRange(ctx, s.outboxKey(qs[0]), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, entries, 1, "the outcome waits in its queue's outbox")
	_, err = other.Rescue(ctx, store.RescueParams{Limit: 10})
	require.NoError(t, err)
	wfReleased(t, s, b, `["ra"]`)
	requireOutboxesEmpty(t, s, qs...)

	// The same entry delivered again (a relay that died before removing it) changes nothing.
	wfFinish(t, s, b, store.StateCompleted, "")
	require.NoError(t, rdb.RPush(ctx, s.outboxKey(qs[0]), entries[0]).Err())
	require.NoError(t, s.relayAll(ctx))
	wfState(t, s, store.StateCompleted, a, b)
	wfGet(t, s, wf, store.WorkflowCompleted)
	requireOutboxesEmpty(t, s, qs...)

	// A parent retried after its failure is no longer ended for its children in other queues: a
	// callback run on completion of two parents waits for the retried one's new outcome.
	wf3 := uuidv7.New()
	p1 := storetest.WorkflowJob(wf3, qs[0])
	p2 := storetest.WorkflowJob(wf3, qs[1])
	cb := storetest.WorkflowCallback(wf3, qs[2], store.RunOnComplete, p1, p2)
	wfInsert(t, s, wf3, p1, p2, cb)
	wfFinish(t, s, p1, store.StateDiscarded, "")
	_, err = s.RetryJob(ctx, p1.ID)
	require.NoError(t, err)
	wfFinish(t, s, p2, store.StateCompleted, `"p2"`)
	wfState(t, s, store.StatePending, cb)
	wfFinish(t, s, p1, store.StateCompleted, `"p1"`)
	wfReleased(t, s, cb, `["p1","p2"]`)
	requireOutboxesEmpty(t, s, qs...)

	// A parent the claim drops for its rate key's limit cancels its child in another queue at once,
	// without waiting for Rescue.
	require.NoError(t, s.SetRateLimit(ctx, "drop-key", store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop}))
	busy := testJob(qs[0])
	busy.RateKey = "drop-key"
	_, err = s.Insert(ctx, []*store.InsertParams{busy})
	require.NoError(t, err)
	held := wfRun(t, s, busy, time.Minute) // takes the key's one slot
	wf4 := uuidv7.New()
	dp := storetest.WorkflowJob(wf4, qs[0])
	dp.RateKey = "drop-key"
	dk := storetest.WorkflowJob(wf4, qs[1], dp)
	wfInsert(t, s, wf4, dp, dk)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: qs[0], Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, jobs, "the limit holds the parent back")
	wfState(t, s, store.StateDiscarded, dp)
	wfState(t, s, store.StateCancelled, dk)
	_, err = s.Finish(ctx, []store.Completion{{ID: held.ID, Attempt: held.Attempt, Token: held.ClaimToken, State: store.StateCompleted}})
	require.NoError(t, err)
	requireOutboxesEmpty(t, s, qs...)

	// Six parents over two queues, one child in a third, the parents finished by two clients at once.
	wf2 := uuidv7.New()
	var parents []*store.InsertParams
	for i := range 6 {
		parents = append(parents, storetest.WorkflowJob(wf2, qs[i%2]))
	}
	kid := storetest.WorkflowJob(wf2, qs[2], parents...)
	wfInsert(t, s, wf2, append(slices.Clone(parents), kid)...)
	claimed := make([]*store.Job, len(parents))
	for i, p := range parents {
		claimed[i] = wfRun(t, s, p, time.Minute)
	}
	got := countInserts(t, s)
	var wg sync.WaitGroup
	errs := make([]error, len(claimed))
	for i, j := range claimed {
		wg.Add(1)
		go func(st *Store) {
			defer wg.Done()
			res, err := st.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken,
				State: store.StateCompleted, Result: []byte(fmt.Sprint(i))}})
			if err == nil && !res[0].Applied {
				err = fmt.Errorf("outcome of %s not applied", j.ID)
			}
			errs[i] = err
		}([]*Store{s, other}[i%2])
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	wfReleased(t, s, kid, `[0,1,2,3,4,5]`)
	waitUntil(t, "the child's queue to be announced", func() bool { return got.of(qs[2]) >= 1 })
	requireOutboxesEmpty(t, s, qs...)
	wfFinish(t, s, kid, store.StateCompleted, "")
	wfGet(t, s, wf2, store.WorkflowCompleted)
}

// TestClusterSplitWorkflowSweep: a writer that died between a split workflow's parts leaves parts
// that Cleanup deletes, freeing the ids; one that died after writing every part but before releasing
// the roots has them released by Cleanup. Nothing of either ran before.
func TestClusterSplitWorkflowSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := clusterClient(t)
	s := clusterStore(t, rdb)
	qs := queuesOnEachMaster(t, rdb, s)
	keys := s.wfRegKeys()

	// write registers p's workflow and writes its parts in queues, as InsertWorkflow's first calls.
	write := func(p store.WorkflowParams, queues ...string) {
		t.Helper()
		reg := []any{p.ID, splitValue(qs[:2])}
		kids := map[string][]string{}
		queueOf := map[string]string{}
		for _, jp := range p.Jobs {
			reg = append(reg, jp.ID, jp.Queue)
			queueOf[jp.ID] = jp.Queue
			for _, pid := range jp.ParentIDs {
				kids[pid] = append(kids[pid], jp.ID)
			}
		}
		require.NoError(t, ignoreNil(scriptRegisterWorkflow.Run(ctx, rdb, keys, reg...).Err()))
		require.NoError(t, rdb.SAdd(ctx, s.splitSetKey(), qs[0], qs[1]).Err())
		for _, q := range queues {
			part, n, err := splitPartArgs(p, q, kids, queueOf)
			require.NoError(t, err)
			head := []any{p.ID, "t", "dag", "", "", n, n, "1", "0"}
			require.NoError(t, scriptInsertWorkflow.Run(ctx, rdb, s.keys(q), append(head, part...)...).Err())
		}
		// Cleanup takes only registrations older than pendingGrace for dead: age it.
		require.NoError(t, rdb.ZAdd(ctx, keys[2], goredis.Z{Score: 1, Member: p.ID}).Err())
	}
	claimable := func(p *store.InsertParams) bool {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: p.Queue, Kinds: []string{p.Kind}, Limit: 1, WorkerID: "w",
			LeaseDuration: time.Minute})
		require.NoError(t, err)
		return len(jobs) == 1
	}

	// Half written: the part in qs[0] exists, held; qs[1]'s was never written.
	half := uuidv7.New()
	a := storetest.WorkflowJob(half, qs[0])
	b := storetest.WorkflowJob(half, qs[1], a)
	hp := store.WorkflowParams{ID: half, Jobs: []*store.InsertParams{a, b}}
	write(hp, qs[0])
	wfState(t, s, store.StatePending, a)
	require.False(t, claimable(a), "a held root is not claimable")
	_, _, err := s.InsertWorkflow(ctx, hp)
	require.ErrorIs(t, err, store.ErrDuplicate, "the id is taken while the registration is pending")

	// Fully written, never released.
	full := uuidv7.New()
	c := storetest.WorkflowJob(full, qs[0])
	d := storetest.WorkflowJob(full, qs[1], c)
	write(store.WorkflowParams{ID: full, Jobs: []*store.InsertParams{c, d}}, qs[0], qs[1])
	require.False(t, claimable(c), "a held root is not claimable")

	_, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now(), Limit: 10})
	require.NoError(t, err)
	n, err := rdb.ZCard(ctx, keys[2]).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no registration is pending any more")

	_, err = s.GetJob(ctx, a.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the half-written part is deleted")
	_, err = s.GetWorkflow(ctx, half)
	require.ErrorIs(t, err, store.ErrNotFound)
	wfInsert(t, s, half, a, b)
	wfFinish(t, s, a, store.StateCompleted, `"again"`)
	wfReleased(t, s, b, `["again"]`)

	// A part that fails to write (here: its queue holds a part of that id already) undoes the parts
	// written: the insert fails as a whole and stores nothing.
	failing := uuidv7.New()
	g := storetest.WorkflowJob(failing, qs[0])
	h := storetest.WorkflowJob(failing, qs[1], g)
	require.NoError(t, rdb.HSet(ctx, s.qkey(qs[1])+"wf:"+failing, "id", failing).Err())
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: failing, Jobs: []*store.InsertParams{g, h}})
	require.ErrorIs(t, err, store.ErrDuplicate)
	for _, p := range []*store.InsertParams{g, h} {
		_, err = s.GetJob(ctx, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "a failed workflow's job is not stored")
	}
	ex, err := rdb.Exists(ctx, s.qkey(qs[0])+"wf:"+failing, s.qkey(qs[0])+"wfj:"+failing).Result()
	require.NoError(t, err)
	require.Zero(t, ex, "the part written is deleted")
	ok, err := rdb.HExists(ctx, s.wfIndexKey(), failing).Result()
	require.NoError(t, err)
	require.False(t, ok, "and the workflow is not indexed")
	n, err = rdb.ZCard(ctx, keys[2]).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nor its registration pending")

	wfGet(t, s, full, store.WorkflowRunning)
	require.True(t, claimable(c), "the fully written workflow's root is released")
	listed, _, err := s.ListWorkflows(ctx, store.WorkflowListParams{Limit: 10})
	require.NoError(t, err)
	var names []string
	for _, w := range listed {
		names = append(names, w.ID)
	}
	require.Contains(t, names, full, "and listed")
}

// splitChildEnv makes the test binary a worker process for TestClusterSplitWorkflowKilledWorker:
// "addrs\tprefix\tqueues" (comma-separated lists). It claims jobs of the queues in turn (short
// leases), completes each with its own id as result, prints "done ID" after each outcome, and runs
// until it is killed.
const splitChildEnv = "PRONTO_REDIS_SPLIT_CHILD"

func runSplitChild(v string) int {
	s, parts, code := childStore(v, 3, "addrs, prefix, queues")
	if s == nil {
		return code
	}
	ctx := context.Background()
	for {
		for _, q := range strings.Split(parts[2], ",") {
			if err := workSplit(ctx, s, q, "doomed", time.Second, func(id string) { fmt.Printf("done %s\n", id) }); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
}

// workSplit claims up to 5 jobs of queue and completes each with its id (a JSON string) as result,
// calling done after each outcome is written.
func workSplit(ctx context.Context, s *Store, queue, worker string, lease time.Duration, done func(string)) error {
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: queue, Limit: 5, WorkerID: worker, LeaseDuration: lease})
	if err != nil {
		return err
	}
	for _, j := range jobs {
		_, err := s.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken,
			State: store.StateCompleted, Result: []byte(`"` + j.ID + `"`)}})
		if err != nil {
			return err
		}
		done(j.ID)
	}
	return nil
}

// TestClusterSplitWorkflowKilledWorker: a worker process running the jobs of workflows that span
// the three masters' queues is killed mid-run (holding claims, or between an outcome and its
// relay); the survivor rescues its jobs and relays what it left, and every workflow completes, each
// child released with its parents' results, and no outbox keeps an entry.
func TestClusterSplitWorkflowKilledWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s, qs := migratedCluster(t)
	type flow struct{ id, a, b, c, d string }
	var flows []flow
	for range 30 {
		// a (qs[0]) -> b (qs[1]) -> c (qs[2]); a and c -> d (qs[1]).
		wf := uuidv7.New()
		a := storetest.WorkflowJob(wf, qs[0])
		b := storetest.WorkflowJob(wf, qs[1], a)
		c := storetest.WorkflowJob(wf, qs[2], b)
		d := storetest.WorkflowJob(wf, qs[1], a, c)
		for _, p := range []*store.InsertParams{a, b, c, d} {
			p.Kind = "step" // any worker takes any step
		}
		wfInsert(t, s, wf, a, b, c, d)
		flows = append(flows, flow{wf, a.ID, b.ID, c.ID, d.ID})
	}

	cmd, sc := startChild(t, splitChildEnv, rdb, s, strings.Join(qs, ","))
	for n := 0; n < 40 && sc.Scan(); n++ {
		require.True(t, strings.HasPrefix(sc.Text(), "done "), "helper said %q", sc.Text())
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	require.Eventually(t, func() bool {
		_, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
		require.NoError(t, err)
		for _, q := range qs {
			require.NoError(t, workSplit(ctx, s, q, "survivor", time.Minute, func(string) {}))
		}
		for _, f := range flows {
			w, err := s.GetWorkflow(ctx, f.id)
			require.NoError(t, err)
			if w.State != store.WorkflowCompleted {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "every workflow completes, the dead worker's jobs and outcomes too")
	for _, f := range flows {
		for id, want := range map[string]string{f.b: `["` + f.a + `"]`, f.c: `["` + f.b + `"]`, f.d: `["` + f.a + `","` + f.c + `"]`} {
			j, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, j.State)
			require.JSONEq(t, want, string(j.ParentResults), "job %s ran with its parents' results", id)
		}
	}
	requireOutboxesEmpty(t, s, qs...)
}
