package sqlite

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// SQLite-specific tests of unique jobs, rate limits and workflows; the shared behaviour is in
// store/storetest.

// chain returns the params of a workflow of n jobs in queue q, each waiting for the one before.
func chain(wf, q string, n int) []*store.InsertParams {
	ps := params(q, n)
	for i, p := range ps {
		p.WorkflowID = wf
		if i > 0 {
			p.ParentIDs = []string{ps[i-1].ID}
			p.State = store.StatePending
		}
	}
	return ps
}

// TestWorkflowLongChainFailsAtOnce: a 2000-step chain whose first step fails has its 1999 other steps
// cancelled by that one Finish, in its transaction (the cascade is a loop, not a recursion).
func TestWorkflowLongChainFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	const steps = 2000
	wf := uuidv7.New()
	_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Type: "chain", Jobs: chain(wf, "long", steps)})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "long", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	start := time.Now()
	res, err := s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateDiscarded}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	t.Logf("failing step 0 cancelled %d steps in %v", steps-1, time.Since(start))

	w, err := s.GetWorkflow(ctx, wf)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowFailed, w.State)
	require.Equal(t, 1, w.Counts[store.StateDiscarded])
	require.Equal(t, steps-1, w.Counts[store.StateCancelled])
	require.Len(t, w.Counts, len(store.AllStates), "every state, zero included")
}

// TestCleanupKeepsWaitedParents: Cleanup keeps a finished workflow job while a pending child still
// waits for it (the child needs its outcome and result), and deletes it, with the graph's edges,
// once the child is decided; the workflow goes with its last jobs.
func TestCleanupKeepsWaitedParents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	wf := uuidv7.New()
	ps := params("wf", 3)
	a, b, c := ps[0], ps[1], ps[2]
	a.Kind, b.Kind = "a", "b"
	for _, p := range ps {
		p.WorkflowID = wf
	}
	c.ParentIDs, c.State = []string{a.ID, b.ID}, store.StatePending
	_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: ps})
	require.NoError(t, err)
	plain := params("wf", 1)
	plain[0].Kind = "plain"
	_, err = s.Insert(ctx, plain)
	require.NoError(t, err)

	complete := func(kind, result string) {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "wf", Kinds: []string{kind}, Limit: 1, WorkerID: "w",
			LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		res, err := s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateCompleted,
			Result: json.RawMessage(result)}})
		require.NoError(t, err)
		require.True(t, res[0].Applied)
	}
	cleanup := func() int {
		t.Helper()
		n, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour), Limit: 100})
		require.NoError(t, err)
		return n
	}
	complete("a", `"from a"`)
	complete("plain", `1`)
	require.Equal(t, 1, cleanup(), "only the plain job goes; a is waited for")
	_, err = s.GetJob(ctx, a.ID)
	require.NoError(t, err)

	complete("b", `"from b"`)
	j, err := s.GetJob(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.JSONEq(t, `["from a","from b"]`, string(j.ParentResults))
	require.Equal(t, 2, cleanup(), "a and b go once their child is released")
	complete(c.Kind, `3`)
	require.Equal(t, 1, cleanup())
	var edges int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pronto_job_deps`).Scan(&edges))
	require.Zero(t, edges, "the edges go with the jobs")
	_, err = s.GetWorkflow(ctx, wf)
	require.ErrorIs(t, err, store.ErrNotFound, "and the workflow with its last jobs")
}

// TestFinishMixedBatch: one Finish with plain and workflow jobs, a stale completion and a job named
// twice applies each as it would alone, and releases the workflow's children.
func TestFinishMixedBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	wf := uuidv7.New()
	ps := chain(wf, "mixed", 2)
	_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: ps})
	require.NoError(t, err)
	_, err = s.Insert(ctx, params("mixed", 2))
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "mixed", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 3)

	var cs []store.Completion
	for _, j := range jobs {
		cs = append(cs, store.Completion{ID: j.ID, Attempt: 1, State: store.StateCompleted, Result: json.RawMessage(`"r"`)})
	}
	cs = append(cs, store.Completion{ID: jobs[0].ID, Attempt: 7, State: store.StateCompleted}) // stale
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	require.Len(t, res, 4)
	for i := range 3 {
		require.True(t, res[i].Applied, "completion %d", i)
	}
	require.False(t, res[3].Applied, "a stale completion is not applied")
	child, err := s.GetJob(ctx, ps[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, child.State)
	require.JSONEq(t, `["r"]`, string(child.ParentResults))
}

// TestInsertSQLTxUnique: unique inserts inside the application's transaction resolve their conflicts
// there: a refused batch leaves the transaction usable, and a replaced job's runner is told only when
// the transaction commits.
func TestInsertSQLTxUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	r := record(t, s.Notifier())
	holder := params("tx", 1)[0]
	holder.UniqueKey = "k"
	_, err := s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)

	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // committed below
	refused := params("tx", 2)
	refused[1].UniqueKey = "k"
	_, err = s.InsertSQLTx(ctx, tx, refused)
	require.ErrorIs(t, err, store.ErrUniqueConflict)

	repl := params("tx", 1)[0]
	repl.UniqueKey, repl.OnConflict = "k", store.ConflictReplace
	_, err = s.InsertSQLTx(ctx, tx, []*store.InsertParams{repl})
	require.NoError(t, err)
	cancels := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for _, x := range r.ns {
			if x.Kind == store.NotifyCancel && x.JobID == holder.ID {
				n++
			}
		}
		return n
	}
	require.Zero(t, cancels(), "nothing is told before the commit")
	require.NoError(t, tx.Commit())
	require.Equal(t, 1, cancels(), "the replaced job's runner is told at the commit")

	for _, p := range refused {
		_, err := s.GetJob(ctx, p.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "the refused batch stored nothing")
	}
	old, err := s.GetJob(ctx, holder.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, old.State)
	got, err := s.GetJob(ctx, repl.ID)
	require.NoError(t, err)
	require.Equal(t, "k", got.UniqueKey)
}

// TestClaimPlanWithoutLimits pins what claims of jobs without rate keys pay for the feature: the claim
// still walks the claim index, and the guard is one uncorrelated seek, evaluated once per statement
// rather than once per row, whatever the number of stored limits. The correlated subqueries are the
// unique-key check, which runs only for jobs with a key entering their unique states, and the walk's
// seek of the next priority, once per priority. Nothing scans a table (the scans of the constant row
// and of the priorities' list are the walk's).
func TestClaimPlanWithoutLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+claimQuery(1), 1, 2, "w", "q", 10, "k")
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "USING INDEX pronto_jobs_claim (queue=?)", text)
	require.Contains(t, text, "USING INDEX pronto_jobs_rate_queue (queue=?", text)
	require.Contains(t, text, "USING INDEX pronto_jobs_claim (queue=? AND priority=? AND scheduled_at<?)", text)
	for _, line := range plan {
		if strings.HasPrefix(line, "SCAN") {
			require.Contains(t, []string{"SCAN CONSTANT ROW", "SCAN prios"}, line, text)
		}
	}
	require.NotContains(t, text, "pronto_rate_limits", text)
	for i, line := range plan {
		if strings.HasPrefix(line, "CORRELATED") { // the unique-key check, and the next priority's seek
			require.Less(t, i+1, len(plan), text)
			next := plan[i+1]
			if !strings.Contains(next, "USING INDEX pronto_jobs_unique (unique_key=?)") {
				require.Contains(t, next, "USING INDEX pronto_jobs_claim (queue=? AND priority<?)", text)
			}
		}
	}
}

// heldCount returns how many jobs claims hold back (out of the claim index).
func heldCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM pronto_jobs WHERE held IS NOT NULL`).Scan(&n))
	return n
}

// TestHeldBacklog: the waiting jobs of an exhausted key are held out of the claim index after one
// claim meets them, so later claims do not walk past them; held jobs look unchanged, come back in
// claim order (before later, lower-ranked jobs) when their key has room, and are released when the
// limit changes.
func TestHeldBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	claim := func(limit int) []*store.Job {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: limit, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return jobs
	}
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1}))
	const backlog = 500
	limited := params("q", backlog)
	for _, p := range limited {
		p.RateKey = "k"
	}
	_, err := s.Insert(ctx, limited)
	require.NoError(t, err)
	plain := params("q", 3)
	_, err = s.Insert(ctx, plain)
	require.NoError(t, err)

	got := claim(4)
	require.Equal(t, []string{limited[0].ID, plain[0].ID, plain[1].ID, plain[2].ID}, ids(got),
		"the claim takes the key's one slot and reaches past its backlog")
	require.Equal(t, backlog-1, heldCount(t, s), "the rest of the backlog is held")
	j, err := s.GetJob(ctx, limited[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "a held job looks as it was")
	info, err := s.GetRateLimit(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(backlog-1), info.Waiting)
	require.Empty(t, claim(10), "no slot, nothing else")

	// A freed slot takes the best held job, ahead of a later plain job.
	later := params("q", 1)
	_, err = s.Insert(ctx, later)
	require.NoError(t, err)
	res, err := s.Finish(ctx, []store.Completion{{ID: got[0].ID, Attempt: 1, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	require.Equal(t, []string{limited[1].ID, later[0].ID}, ids(claim(10)))
	require.Equal(t, backlog-2, heldCount(t, s))

	// A changed limit releases the held jobs, to be judged by it.
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 3}))
	require.Zero(t, heldCount(t, s))
	require.Equal(t, []string{limited[2].ID, limited[3].ID}, ids(claim(10)), "two more slots")
	require.Equal(t, backlog-4, heldCount(t, s))
	// Setting the same limit again (as inserts carrying it do) leaves them held.
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 3}))
	require.Equal(t, backlog-4, heldCount(t, s))

	// A deleted limit releases them too: they are unlimited now.
	require.NoError(t, s.DeleteRateLimit(ctx, "k"))
	require.Zero(t, heldCount(t, s))
	require.Len(t, claim(backlog), backlog-4)
}

// ids returns the ids of jobs, in order.
func ids(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestUniqueReplaceWithinBatch: a batch whose later job replaces an earlier one returns the earlier
// one as it is after the batch (cancelled), not as it was written.
func TestUniqueReplaceWithinBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	ps := params("q", 2)
	ps[0].UniqueKey = "k"
	ps[1].UniqueKey, ps[1].OnConflict = "k", store.ConflictReplace
	jobs, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	require.Equal(t, ps[0].ID, jobs[0].ID)
	require.Equal(t, store.StateCancelled, jobs[0].State)
	require.False(t, jobs[0].CompletedAt.IsZero())
	require.Equal(t, store.StateAvailable, jobs[1].State)
	stored, err := s.GetJob(ctx, ps[0].ID)
	require.NoError(t, err)
	require.Equal(t, jobs[0].State, stored.State)
}

// uniqueIn returns params of n available jobs in queue q holding key in the given states.
func uniqueIn(q, key string, n int, states ...store.State) []*store.InsertParams {
	ps := params(q, n)
	for _, p := range ps {
		p.UniqueKey, p.UniqueStates = key, states
	}
	return ps
}

// TestUniqueKeyThroughTransitions: a transition moving a job into its unique states while another
// job holds the key (possible with unique states that leave some states out) does not fail its batch
// on the unique index: the entering job gives its key up. A manual RetryJob is refused instead, unless
// the holder's period ran out.
func TestUniqueKeyThroughTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var skew atomic.Int64 // how far the store's clock runs ahead
	s := openTest(t, WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	claim := func(q string) []*store.Job {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return jobs
	}
	holders := func(key string) int {
		t.Helper()
		var n int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs WHERE unique_key = ?`, key).Scan(&n))
		return n
	}

	// Held only when active: two available jobs with the key, claimed together.
	ps := uniqueIn("claim", "ka", 2, store.StateActive)
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs := claim("claim")
	require.Len(t, jobs, 2, "one claim takes both")
	require.ElementsMatch(t, []string{"ka", ""}, []string{jobs[0].UniqueKey, jobs[1].UniqueKey}, "one keeps the key")
	require.Equal(t, 1, holders("ka"))

	// Held only when completed: both complete in one batch.
	ps = uniqueIn("finish", "kc", 2, store.StateCompleted)
	_, err = s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs = claim("finish")
	require.Len(t, jobs, 2)
	res, err := s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateCompleted},
		{ID: jobs[1].ID, Attempt: 1, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied && res[1].Applied)
	require.Equal(t, 1, holders("kc"), "the job with the smaller id keeps the key")
	first, err := s.GetJob(ctx, min(jobs[0].ID, jobs[1].ID))
	require.NoError(t, err)
	require.Equal(t, "kc", first.UniqueKey)

	// Held only when available: a scheduled job comes due while another is available.
	sched := uniqueIn("promote", "kp", 1, store.StateAvailable)[0]
	sched.State, sched.ScheduledAt = store.StateScheduled, time.Now().Add(-time.Second)
	_, err = s.Insert(ctx, []*store.InsertParams{sched})
	require.NoError(t, err)
	_, err = s.Insert(ctx, uniqueIn("promote", "kp", 1, store.StateAvailable))
	require.NoError(t, err)
	// A job inserted outside its unique states holds nothing yet, but is not inserted while another
	// job holds its key.
	later := uniqueIn("promote", "kp", 1, store.StateAvailable)[0]
	later.State, later.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	_, err = s.Insert(ctx, []*store.InsertParams{later})
	require.ErrorIs(t, err, store.ErrUniqueConflict)
	n, err := s.Promote(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	promoted, err := s.GetJob(ctx, sched.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, promoted.State)
	require.Empty(t, promoted.UniqueKey, "the promoted job gives its key up")

	// RetryJob of a job whose key another job holds is refused, until that job's period runs out.
	old := uniqueIn("retry", "kr", 1)[0]
	_, err = s.Insert(ctx, []*store.InsertParams{old})
	require.NoError(t, err)
	_, err = s.CancelJob(ctx, old.ID)
	require.NoError(t, err)
	holder := uniqueIn("retry", "kr", 1)[0]
	holder.UniqueUntil = time.Now().Add(time.Hour)
	_, err = s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)
	_, err = s.RetryJob(ctx, old.ID)
	var ue *store.UniqueConflictError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, holder.ID, ue.ExistingID)
	require.Equal(t, store.StateCancelled, mustState(t, s, old.ID), "a refused retry changes nothing")
	skew.Store(int64(time.Hour + time.Second)) // the holder's period runs out
	j, err := s.RetryJob(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, "kr", j.UniqueKey)
	h, err := s.GetJob(ctx, holder.ID)
	require.NoError(t, err)
	require.Empty(t, h.UniqueKey, "the lapsed holder gave its key up")
}

// mustState returns the state of job id.
func mustState(t *testing.T, s *Store, id string) store.State {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j.State
}
