package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// processes returns n stores over one fresh schema, each on a pool of its own, as n processes of
// an application would be.
func processes(t *testing.T, n int) []*Store {
	t.Helper()
	schema := testdb.Schema(t)
	out := make([]*Store, n)
	for i := range out {
		out[i] = newStore(t, testdb.NewPool(t, 4), schema)
	}
	return out
}

// uniqueParams returns params for an available job in queue holding key with policy.
func uniqueParams(queue, key string, policy store.OnConflict) *store.InsertParams {
	p := params(queue)
	p.UniqueKey, p.OnConflict = key, policy
	return p
}

// countJobs counts the jobs of queue in state.
func countJobs(t *testing.T, s *Store, queue string, state store.State) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM `+s.Schema()+`.jobs WHERE queue = $1 AND state = $2`, queue, string(state)).Scan(&n))
	return n
}

// TestUniqueConcurrentProcesses races inserts of one key from several processes, alone and inside
// batches large enough for COPY: the unique index lets exactly one win every round.
func TestUniqueConcurrentProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := processes(t, 4)
	for round := range 6 {
		queue, key := fmt.Sprintf("race-%d", round), uuidv7.New()
		const inserters = 12
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			wins  atomic.Int32
			errs  = make(chan error, inserters)
		)
		for i := range inserters {
			batch := []*store.InsertParams{uniqueParams(queue, key, store.ConflictReject)}
			if i%3 == 0 { // with plain jobs around it, written with COPY in the same transaction
				for range pipelineMax + 1 {
					batch = append(batch, params(queue))
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := stores[i%len(stores)].Insert(ctx, batch)
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, store.ErrUniqueConflict):
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int32(1), wins.Load(), "round %d: exactly one insert of the key wins", round)
		var holders int
		require.NoError(t, stores[0].Pool().QueryRow(ctx,
			`SELECT count(*) FROM `+stores[0].Schema()+`.jobs WHERE unique_key = $1`, key).Scan(&holders))
		require.Equal(t, 1, holders)
	}
}

// TestUniqueInsertPgxTx: a unique job inserted in a transaction that rolls back holds nothing, and
// a conflict inside an application's transaction keeps nothing of the batch but leaves the
// transaction usable.
func TestUniqueInsertPgxTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	key := uuidv7.New()

	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	first := uniqueParams("q", key, "")
	jobs, err := s.InsertPgxTx(ctx, tx, []*store.InsertParams{first})
	require.NoError(t, err)
	require.Equal(t, key, jobs[0].UniqueKey)
	require.NoError(t, tx.Rollback(ctx))
	_, err = s.GetJob(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	holder := uniqueParams("q", key, "")
	_, err = s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err, "the rolled-back insert left the key free")

	tx, err = s.Pool().Begin(ctx)
	require.NoError(t, err)
	before := params("q")
	_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{before})
	require.NoError(t, err)
	plain, dup := params("q"), uniqueParams("q", key, store.ConflictReject)
	_, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{plain, dup})
	var ue *store.UniqueConflictError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, holder.ID, ue.ExistingID)
	ignored := uniqueParams("q", key, store.ConflictIgnore)
	jobs, err = s.InsertPgxTx(ctx, tx, []*store.InsertParams{ignored})
	require.NoError(t, err, "the transaction is still usable")
	require.True(t, jobs[0].Duplicate)
	require.NoError(t, tx.Commit(ctx))
	_, err = s.GetJob(ctx, before.ID)
	require.NoError(t, err, "what the transaction did before the conflict is kept")
	for _, id := range []string{plain.ID, dup.ID, ignored.ID} {
		_, err = s.GetJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
}

// TestUniqueKeyGivenUpOnEntry: jobs that enter their unique states through an automatic
// transition while another job holds the key give the key up instead of failing the statement
// (and with it a whole batch of promotions, claims or completions).
func TestUniqueKeyGivenUpOnEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)

	// Held only while available: two jobs scheduled with one key come due together.
	key := uuidv7.New()
	var due []*store.InsertParams
	for range 2 {
		p := uniqueParams("promote", key, "")
		p.UniqueStates = []store.State{store.StateAvailable}
		p.State, p.ScheduledAt = store.StateScheduled, time.Now().Add(-time.Minute)
		due = append(due, p)
	}
	other := params("promote")
	other.State, other.ScheduledAt = store.StateScheduled, time.Now().Add(-time.Minute)
	_, err := s.Insert(ctx, append(due, other))
	require.NoError(t, err)
	n, err := s.Promote(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 3, n, "every due job is promoted")
	a, err := s.GetJob(ctx, due[0].ID)
	require.NoError(t, err)
	b, err := s.GetJob(ctx, due[1].ID)
	require.NoError(t, err)
	require.Equal(t, key, a.UniqueKey, "the first by id keeps the key")
	require.Empty(t, b.UniqueKey, "the second gives it up")

	// Held only when completed: two active jobs with one key complete in one batch.
	key2 := uuidv7.New()
	var ps []*store.InsertParams
	for range 2 {
		p := uniqueParams("complete", key2, "")
		p.UniqueStates = []store.State{store.StateCompleted}
		ps = append(ps, p)
	}
	_, err = s.Insert(ctx, ps)
	require.NoError(t, err)
	claimed, err := s.Claim(ctx, claimParams("complete", 10))
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	res, err := s.Finish(ctx, []store.Completion{
		{ID: claimed[0].ID, Attempt: 1, State: store.StateCompleted},
		{ID: claimed[1].ID, Attempt: 1, State: store.StateCompleted},
	})
	require.NoError(t, err)
	require.True(t, res[0].Applied && res[1].Applied)
	kept := 0
	for _, p := range ps {
		j, err := s.GetJob(ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, j.State)
		if j.UniqueKey == key2 {
			kept++
		}
	}
	require.Equal(t, 1, kept, "one completed job holds the key")
	_, err = s.Insert(ctx, []*store.InsertParams{uniqueParams("complete", key2, "")})
	require.ErrorIs(t, err, store.ErrUniqueConflict, "and it blocks new ones")

	// Held only while active: two available jobs with one key claimed together.
	key3 := uuidv7.New()
	ps = nil
	for range 2 {
		p := uniqueParams("claim", key3, "")
		p.UniqueStates = []store.State{store.StateActive}
		ps = append(ps, p)
	}
	_, err = s.Insert(ctx, ps)
	require.NoError(t, err)
	claimed, err = s.Claim(ctx, claimParams("claim", 10))
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.ElementsMatch(t, []string{key3, ""}, []string{claimed[0].UniqueKey, claimed[1].UniqueKey})
}

// TestRetryJobUniqueConflict: retrying a job whose key another job took over by now is refused
// with the holder named, and changes nothing.
func TestRetryJobUniqueConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	key := uuidv7.New()
	old := uniqueParams("q", key, "")
	_, err := s.Insert(ctx, []*store.InsertParams{old})
	require.NoError(t, err)
	_, err = s.CancelJob(ctx, old.ID)
	require.NoError(t, err)
	holder := uniqueParams("q", key, "")
	_, err = s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)

	_, err = s.RetryJob(ctx, old.ID)
	var ue *store.UniqueConflictError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, holder.ID, ue.ExistingID)
	require.Equal(t, store.StateAvailable, ue.ExistingState)
	j, err := s.GetJob(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)

	_, err = s.CancelJob(ctx, holder.ID)
	require.NoError(t, err)
	j, err = s.RetryJob(ctx, old.ID)
	require.NoError(t, err, "once the key is free the retry goes through")
	require.Equal(t, store.StateAvailable, j.State)
}

// TestRateLimitAcrossProcesses claims one limited queue from several processes at once: the
// database never holds more active jobs of the key than MaxActive, as an observer polling it sees,
// and a rate window never admits more than Rate claims.
func TestRateLimitAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := processes(t, 4)
	const (
		maxActive = 3
		total     = 80
	)
	require.NoError(t, stores[0].SetRateLimit(ctx, "api", store.RateLimit{MaxActive: maxActive}))
	batch := make([]*store.InsertParams, total)
	for i := range batch {
		batch[i] = params("limited")
		batch[i].RateKey = "api"
		if i%4 == 0 {
			batch[i].RateKey = ""
		}
	}
	_, err := stores[0].Insert(ctx, batch)
	require.NoError(t, err)

	var (
		done     atomic.Int64
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		observed = make(chan int64, 1)
	)
	go func() { // the observer: the database's own count of the key's active jobs
		var max int64
		defer func() { observed <- max }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := stores[0].Pool().QueryRow(ctx, `SELECT count(*) FROM `+stores[0].Schema()+
				`.jobs WHERE rate_key = 'api' AND state = 'active'`).Scan(&n); err == nil && n > max {
				max = n
			}
		}
	}()
	errs := make(chan error, 8)
	for w := range 8 {
		s := stores[w%len(stores)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Minute)
			for done.Load() < total && time.Now().Before(deadline) {
				jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "limited", Limit: 1 + w%4,
					WorkerID: fmt.Sprint("w", w), LeaseDuration: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				time.Sleep(time.Millisecond)
				cs := make([]store.Completion, len(jobs))
				for i, j := range jobs {
					cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
				}
				if _, err := s.Finish(ctx, cs); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(jobs)))
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(total), done.Load(), "every job ran")
	require.LessOrEqual(t, <-observed, int64(maxActive), "never more than MaxActive active jobs of the key")
	require.Equal(t, total, countJobs(t, stores[0], "limited", store.StateCompleted))

	// A window of 5 claims per hour, claimed from every process at once, admits exactly 5.
	require.NoError(t, stores[0].SetRateLimit(ctx, "hourly", store.RateLimit{Rate: 5, Period: time.Hour}))
	batch = make([]*store.InsertParams, 20)
	for i := range batch {
		batch[i] = params("hourly")
		batch[i].RateKey = "hourly"
	}
	_, err = stores[0].Insert(ctx, batch)
	require.NoError(t, err)
	var claimed atomic.Int64
	var wg2 sync.WaitGroup
	for w := range 8 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for range 5 {
				jobs, err := stores[w%len(stores)].Claim(ctx, store.ClaimParams{Queue: "hourly", Limit: 2,
					WorkerID: "w", LeaseDuration: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				claimed.Add(int64(len(jobs)))
			}
		}()
	}
	wg2.Wait()
	require.Equal(t, int64(5), claimed.Load())
	info, err := stores[1].GetRateLimit(ctx, "hourly")
	require.NoError(t, err)
	require.Equal(t, int64(5), info.WindowCount)
	require.Equal(t, int64(15), info.Waiting)
}

// TestClaimLimitedKinds: a limited claim keeps to the kinds it was asked for, and reaches jobs
// past an exhausted key's backlog of every kind.
func TestClaimLimitedKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	require.NoError(t, s.SetRateLimit(ctx, "k1", store.RateLimit{MaxActive: 1}))
	var batch []*store.InsertParams
	for i := range 6 {
		p := params("q")
		p.Kind = []string{"a", "b"}[i%2]
		p.RateKey = "k1"
		p.Priority = 10
		batch = append(batch, p)
	}
	plainB := params("q")
	plainB.Kind = "b"
	plainA := params("q")
	plainA.Kind = "a"
	_, err := s.Insert(ctx, append(batch, plainB, plainA))
	require.NoError(t, err)

	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Kinds: []string{"b"}, Limit: 10, WorkerID: "w",
		LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, "b", jobs[0].Kind)
	require.Equal(t, "k1", jobs[0].RateKey, "the limited job comes first, by priority")
	require.Equal(t, plainB.ID, jobs[1].ID)

	jobs, err = s.Claim(ctx, store.ClaimParams{Queue: "q", Kinds: []string{"a"}, Limit: 10, WorkerID: "w",
		LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{plainA.ID}, ids(jobs), "the key's one slot is taken")
}

// TestWorkflowLongChainCascade fails the first step of a chain of 2000: the cascade cancels every
// later step in the same transaction, iteratively, far below max_stack_depth.
func TestWorkflowLongChainCascade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	for _, how := range []string{"discard", "cancel"} {
		const steps = 2000
		wf := uuidv7.New()
		ps := make([]*store.InsertParams, steps)
		for i := range ps {
			ps[i] = params("chain-" + how)
			ps[i].WorkflowID = wf
			if i > 0 {
				ps[i].ParentIDs = []string{ps[i-1].ID}
				ps[i].State = store.StatePending
			}
		}
		_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Type: "chain", Jobs: ps})
		require.NoError(t, err)
		if how == "cancel" {
			_, err = s.CancelJob(ctx, ps[0].ID)
			require.NoError(t, err)
		} else {
			jobs, err := s.Claim(ctx, claimParams("chain-"+how, 10))
			require.NoError(t, err)
			require.Equal(t, []string{ps[0].ID}, ids(jobs))
			res, err := s.Finish(ctx, []store.Completion{{ID: ps[0].ID, Attempt: 1, State: store.StateDiscarded}})
			require.NoError(t, err)
			require.True(t, res[0].Applied)
		}
		w, err := s.GetWorkflow(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, store.WorkflowFailed, w.State)
		cancelled := steps - 1 // every step after the first
		if how == "cancel" {
			cancelled = steps
		}
		require.Equal(t, cancelled, w.Counts[store.StateCancelled], how)
	}
}

// TestCleanupKeepsWaitedForParents: retention cleanup does not delete a finished workflow job whose
// children still wait for it (they need its outcome and its result).
func TestCleanupKeepsWaitedForParents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	wf := uuidv7.New()
	a, b := params("wf"), params("wf")
	a.Kind, b.Kind = "a", "b"
	c := params("wf")
	a.WorkflowID, b.WorkflowID, c.WorkflowID = wf, wf, wf
	c.ParentIDs, c.State = []string{a.ID, b.ID}, store.StatePending
	plain := params("wf")
	plain.Kind = "plain"
	_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: []*store.InsertParams{a, b, c}})
	require.NoError(t, err)
	_, err = s.Insert(ctx, []*store.InsertParams{plain})
	require.NoError(t, err)
	for _, p := range []*store.InsertParams{a, plain} {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "wf", Kinds: []string{p.Kind}, Limit: 1, WorkerID: "w",
			LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		_, err = s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: 1, State: store.StateCompleted,
			Result: []byte(`"` + p.Kind + `"`)}})
		require.NoError(t, err)
	}
	n, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the plain job is deleted")
	_, err = s.GetJob(ctx, a.ID)
	require.NoError(t, err, "the parent c still waits for is kept")

	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "wf", Kinds: []string{"b"}, Limit: 1, WorkerID: "w",
		LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = s.Finish(ctx, []store.Completion{{ID: b.ID, Attempt: 1, State: store.StateCompleted}})
	require.NoError(t, err)
	j, err := s.GetJob(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.JSONEq(t, `["a", null]`, string(j.ParentResults))
	n, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 2, n, "once c is released its parents may go")
}

// TestRateLimitValidation: negative bounds and unknown actions are refused; a rate without a
// period is stored and bounds nothing, like every zero field.
func TestRateLimitValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	for _, bad := range []store.RateLimit{{MaxActive: -1}, {Rate: -1, Period: time.Second},
		{Rate: 1, Period: -time.Second}, {MaxActive: 1, OnLimit: "sometimes"}} {
		require.ErrorIs(t, s.SetRateLimit(ctx, "k", bad), store.ErrInvalidParams, "%+v", bad)
	}
	require.ErrorIs(t, s.SetRateLimit(ctx, "", store.RateLimit{MaxActive: 1}), store.ErrInvalidParams)
	p := params("q")
	p.RateLimit = &store.RateLimit{MaxActive: 1}
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.ErrorIs(t, err, store.ErrInvalidParams, "a limit needs the job's rate key")

	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{Rate: 1}))
	batch := []*store.InsertParams{params("q"), params("q"), params("q")}
	for _, b := range batch {
		b.RateKey = "k"
	}
	_, err = s.Insert(ctx, batch)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Len(t, jobs, 3, "a rate without a period bounds nothing")
}

// TestFailedUniqueInsertLeavesConnectionClean: a unique batch refused by a conflict or a duplicate
// id leaves no transaction open on the pool's connection.
func TestFailedUniqueInsertLeavesConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, testdb.NewPool(t, 1), testdb.Schema(t)) // one connection: any leftover transaction shows
	key := uuidv7.New()
	holder := uniqueParams("q", key, "")
	_, err := s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)
	for _, size := range []int{1, pipelineMax + 6} {
		batch := []*store.InsertParams{uniqueParams("q", key, store.ConflictReject)}
		for range size {
			batch = append(batch, params("q"))
		}
		_, err = s.Insert(ctx, batch)
		require.ErrorIs(t, err, store.ErrUniqueConflict)
		batch[0] = uniqueParams("q", uuidv7.New(), "")
		batch[len(batch)-1].ID = holder.ID
		_, err = s.Insert(ctx, batch)
		require.ErrorIs(t, err, store.ErrDuplicate)
	}
	conn, err := s.Pool().Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "no transaction is left open")
	conn.Release()
	require.Equal(t, 1, countJobs(t, s, "q", store.StateAvailable), "nothing of the refused batches is stored")
	jobs, err := s.Insert(ctx, []*store.InsertParams{uniqueParams("q", uuidv7.New(), ""), params("q")})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
}

// TestRetryJobTakesKeyFromLapsedHolder: a holder whose period ran out does not block a retry; it
// gives its key up, as it would to an insert.
func TestRetryJobTakesKeyFromLapsedHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	key := uuidv7.New()
	old := uniqueParams("q", key, "")
	_, err := s.Insert(ctx, []*store.InsertParams{old})
	require.NoError(t, err)
	_, err = s.CancelJob(ctx, old.ID)
	require.NoError(t, err)
	holder := uniqueParams("q", key, "")
	holder.UniqueUntil = time.Now().Add(100 * time.Millisecond)
	_, err = s.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)
	_, err = s.RetryJob(ctx, old.ID)
	require.ErrorIs(t, err, store.ErrUniqueConflict, "the holder's period has not run out yet")

	var j *store.Job
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err = s.RetryJob(ctx, old.ID)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, store.ErrUniqueConflict)
		require.True(t, time.Now().Before(deadline), "the retry goes through once the holder's period ran out")
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, time.Now().Before(holder.UniqueUntil), "not before the period ran out")
	require.Equal(t, key, j.UniqueKey)
	h, err := s.GetJob(ctx, holder.ID)
	require.NoError(t, err)
	require.Empty(t, h.UniqueKey, "the lapsed holder gave its key up")
	require.Equal(t, store.StateAvailable, h.State)
}

// TestUniqueReplaceWithinBatch: a batch whose later job replaces an earlier one returns the earlier
// one as it is after the batch, cancelled.
func TestUniqueReplaceWithinBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	key := uuidv7.New()
	first, second := uniqueParams("q", key, ""), uniqueParams("q", key, store.ConflictReplace)
	jobs, err := s.Insert(ctx, []*store.InsertParams{first, second})
	require.NoError(t, err)
	require.Equal(t, first.ID, jobs[0].ID)
	require.Equal(t, store.StateCancelled, jobs[0].State)
	require.False(t, jobs[0].CompletedAt.IsZero())
	require.Equal(t, second.ID, jobs[1].ID)
	require.Equal(t, store.StateAvailable, jobs[1].State)
	stored, err := s.GetJob(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, stored.State)
}
