package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// uniqueJob returns the parameters of an available job in queue holding key, with the given conflict
// policy and the default unique states.
func uniqueJob(queue, key string, policy store.OnConflict) *store.InsertParams {
	p := job(queue)
	p.UniqueKey = key
	p.OnConflict = policy
	return p
}

// requireConflict requires err to be a *store.UniqueConflictError naming key and the existing job.
func requireConflict(t testing.TB, err error, key, existingID string, existingState store.State) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, store.ErrUniqueConflict)
	var ue *store.UniqueConflictError
	require.True(t, errors.As(err, &ue), "error %v is a *store.UniqueConflictError", err)
	require.Equal(t, key, ue.Key)
	require.Equal(t, existingID, ue.ExistingID)
	require.Equal(t, existingState, ue.ExistingState)
}

// requireAbsent requires that none of ids is stored.
func requireAbsent(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := s.GetJob(ctx(t), id)
		require.ErrorIs(t, err, store.ErrNotFound, "job %s is not stored", id)
	}
}

// queueJobs lists every job of queue.
func queueJobs(t testing.TB, s store.Store, queue string) []*store.Job {
	t.Helper()
	jobs, next, err := s.ListJobs(ctx(t), store.ListParams{Queues: []string{queue}, Limit: 1000})
	require.NoError(t, err)
	require.Empty(t, next)
	return jobs
}

func testUniqueRejectAtomic(t *testing.T, s store.Store) {
	q := uniq("unique-reject")
	key := uniq("key")
	held := insert(t, s, uniqueJob(q, key, ""))[0]
	requireNow(t, held.CreatedAt, "created_at")

	before, after := job(q), job(q)
	dup := uniqueJob(q, key, store.ConflictReject)
	_, err := s.Insert(ctx(t), []*store.InsertParams{before, dup, after})
	requireConflict(t, err, key, held.ID, store.StateAvailable)
	requireAbsent(t, s, before.ID, dup.ID, after.ID)
	require.Len(t, queueJobs(t, s, q), 1, "a refused batch stores nothing")

	// The default policy ("") is reject too, and the holder's current state is reported.
	active := claim(t, s, q, 10)
	require.Equal(t, []string{held.ID}, ids(active))
	_, err = s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
	requireConflict(t, err, key, held.ID, store.StateActive)
	require.Len(t, queueJobs(t, s, q), 1)

	// Jobs with other keys, or none, are not affected.
	insert(t, s, uniqueJob(q, uniq("other-key"), ""), job(q))
}

func testUniqueIgnore(t *testing.T, s store.Store) {
	c := listen(t, s)
	q, other := uniq("unique-ignore"), uniq("unique-ignore-other")
	key := uniq("key")
	held := insert(t, s, uniqueJob(q, key, ""))[0]

	fresh1, fresh2 := job(other), job(other)
	dup := uniqueJob(q, key, store.ConflictIgnore)
	dup.Kind = "impostor"
	jobs, err := s.Insert(ctx(t), []*store.InsertParams{fresh1, dup, fresh2})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.Equal(t, fresh1.ID, jobs[0].ID)
	require.False(t, jobs[0].Duplicate, "a job inserted is not a duplicate")
	require.Equal(t, held.ID, jobs[1].ID, "the existing job is returned in place of the ignored one")
	require.True(t, jobs[1].Duplicate)
	require.Equal(t, "storetest.kind", jobs[1].Kind, "the existing job as stored")
	require.Equal(t, key, jobs[1].UniqueKey)
	require.Equal(t, store.StateAvailable, jobs[1].State)
	require.Equal(t, fresh2.ID, jobs[2].ID)
	require.False(t, jobs[2].Duplicate)

	requireAbsent(t, s, dup.ID)
	get(t, s, fresh1.ID)
	get(t, s, fresh2.ID)
	require.False(t, get(t, s, held.ID).Duplicate, "Duplicate is not stored")
	require.Len(t, queueJobs(t, s, q), 1, "the ignored job is not stored")
	eventually(t, "the insert notification of the rest of the batch", func() bool { return len(c.inserts(other)) > 0 })

	// A batch of only an ignored job inserts nothing and still succeeds.
	jobs, err = s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, store.ConflictIgnore)})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, held.ID, jobs[0].ID)
	require.True(t, jobs[0].Duplicate)
	require.Len(t, queueJobs(t, s, q), 1)
}

func testUniqueReplace(t *testing.T, s store.Store) {
	q := uniq("unique-replace")
	key := uniq("key")
	old := insert(t, s, uniqueJob(q, key, ""))[0]
	repl := uniqueJob(q, key, store.ConflictReplace)
	jobs := insert(t, s, repl)
	require.False(t, jobs[0].Duplicate)
	require.Equal(t, store.StateAvailable, jobs[0].State)
	requireReplaced(t, jobs[0], old.ID, store.StateAvailable)

	o := get(t, s, old.ID)
	require.Equal(t, store.StateCancelled, o.State, "the replaced job is cancelled")
	requireNow(t, o.CompletedAt, "completed_at of the replaced job")
	n := get(t, s, repl.ID)
	require.Equal(t, store.StateAvailable, n.State)
	require.Equal(t, key, n.UniqueKey)
	claimed := claim(t, s, q, 10)
	require.Equal(t, []string{repl.ID}, ids(claimed), "only the new job is claimable")

	// Replacing an active job cancels it and tells its runner.
	c := listen(t, s)
	again := uniqueJob(q, key, store.ConflictReplace)
	jobs = insert(t, s, again)
	requireReplaced(t, jobs[0], repl.ID, store.StateActive)
	require.Equal(t, claimed[0].ClaimToken, jobs[0].Replaced[0].ClaimToken, "the replaced job names the run it stopped")
	require.NotEmpty(t, jobs[0].Replaced[0].WorkerID)
	r := get(t, s, repl.ID)
	require.Equal(t, store.StateCancelled, r.State)
	requireNow(t, r.CompletedAt, "completed_at of the replaced active job")
	require.Len(t, r.Errors, 1, "the claim the replace ended is in the history")
	require.Equal(t, store.ErrorTypeCancelled, r.Errors[0].Type)
	require.Empty(t, o.Errors, "the replaced job no run held has none")
	eventually(t, "the cancel notification of the replaced active job", func() bool {
		return len(c.matching(func(n store.Notification) bool {
			return n.Kind == store.NotifyCancel && n.JobID == repl.ID
		})) == 1
	})
	require.NotEmpty(t, claimed[0].ClaimToken)
	require.Equal(t, claimed[0].ClaimToken, c.matching(func(n store.Notification) bool {
		return n.Kind == store.NotifyCancel && n.JobID == repl.ID
	})[0].ClaimToken, "the notification names the run it stops")
	require.False(t, finish(t, s, store.Completion{ID: repl.ID, Attempt: 1, State: store.StateCompleted}),
		"the replaced job's completion is not applied")
	require.Equal(t, store.StateAvailable, get(t, s, again.ID).State)

	testUniqueReplaceHeldInCancelled(t, s)
}

// testUniqueReplaceHeldInCancelled: a replaced job whose unique states include cancelled would still
// hold its key once cancelled; it gives the key up instead, as the replacement now holds it. So the
// next insert under the key meets the replacement, and the cancelled job is retried without a key
// rather than refused for the key it no longer holds.
func testUniqueReplaceHeldInCancelled(t *testing.T, s store.Store) {
	for _, policy := range []store.OnConflict{store.ConflictReplace, store.ConflictReplaceExceptSchedule} {
		q, key := uniq("unique-replace-cancelled"), uniq("key")
		p := uniqueJob(q, key, "")
		p.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCancelled}
		old := insert(t, s, p)[0]
		repl := uniqueJob(q, key, policy)
		repl.UniqueStates = p.UniqueStates
		requireReplaced(t, insert(t, s, repl)[0], old.ID, store.StateAvailable)
		require.Equal(t, store.StateCancelled, get(t, s, old.ID).State, "%s: the replaced job is cancelled", policy)

		ref := store.UniqueKeyRef{Queue: q, Key: key}
		require.Equal(t, repl.ID, held(t, s, ref)[ref], "%s: the replacement holds the key", policy)

		next := uniqueJob(q, key, store.ConflictReject)
		_, err := s.Insert(ctx(t), []*store.InsertParams{next})
		requireConflict(t, err, key, repl.ID, store.StateAvailable)

		r, err := s.RetryJob(ctx(t), old.ID)
		require.NoError(t, err, "%s: the replaced job gave its key up, so nothing refuses its retry", policy)
		require.Equal(t, store.StateAvailable, r.State)
		require.Empty(t, r.UniqueKey, "%s: the retried job holds no key", policy)
		require.Empty(t, get(t, s, old.ID).UniqueKey)

		// The same within one batch: the later job replaces the earlier, which gives the key up.
		bq, bkey := uniq("unique-replace-cancelled"), uniq("key")
		first, second := uniqueJob(bq, bkey, ""), uniqueJob(bq, bkey, policy)
		first.UniqueStates, second.UniqueStates = p.UniqueStates, p.UniqueStates
		insert(t, s, first, second)
		require.Equal(t, store.StateCancelled, get(t, s, first.ID).State, "%s: the earlier job of the batch is replaced", policy)
		bref := store.UniqueKeyRef{Queue: bq, Key: bkey}
		require.Equal(t, second.ID, held(t, s, bref)[bref], "%s: the later job of the batch holds the key", policy)
		r, err = s.RetryJob(ctx(t), first.ID)
		require.NoError(t, err, "%s: the replaced job of the batch is retried without its key", policy)
		require.Empty(t, r.UniqueKey)
	}
}

func testUniqueReplaceExceptSchedule(t *testing.T, s store.Store) {
	q := uniq("unique-res")
	key := uniq("key")
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	old := uniqueJob(q, key, "")
	old.State, old.ScheduledAt = store.StateScheduled, due
	insert(t, s, old)

	repl := uniqueJob(q, key, store.ConflictReplaceExceptSchedule)
	repl.Kind = "replacement"
	jobs := insert(t, s, repl)
	require.Equal(t, store.StateScheduled, jobs[0].State, "the new job takes over the scheduled state")
	requireTimeEqual(t, due, jobs[0].ScheduledAt, "the new job takes over the schedule")
	requireReplaced(t, jobs[0], old.ID, store.StateScheduled)
	n := get(t, s, repl.ID)
	require.Equal(t, "replacement", n.Kind)
	require.Equal(t, store.StateScheduled, n.State)
	requireTimeEqual(t, due, n.ScheduledAt)
	require.Equal(t, store.StateCancelled, get(t, s, old.ID).State)
	require.Empty(t, claim(t, s, q, 10), "the new job is not due before the old one would have been")
	next, ok, err := s.NextDue(ctx(t), q)
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, due, next, precision)

	// A retryable existing job hands over its state and due time too.
	rkey := uniq("key")
	r := active(t, s, uniqueJob(q, rkey, ""))
	rdue := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	require.True(t, finish(t, s, store.Completion{ID: r.ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: rdue}))
	rrepl := uniqueJob(q, rkey, store.ConflictReplaceExceptSchedule)
	requireReplaced(t, insert(t, s, rrepl)[0], r.ID, store.StateRetryable)
	rn := get(t, s, rrepl.ID)
	require.Equal(t, store.StateRetryable, rn.State)
	requireTimeEqual(t, rdue, rn.ScheduledAt)
	require.Equal(t, store.StateCancelled, get(t, s, r.ID).State)

	// An available existing job is simply replaced: the new job keeps its own state and schedule.
	akey := uniq("key")
	a := insert(t, s, uniqueJob(q, akey, ""))[0]
	later := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
	arepl := uniqueJob(q, akey, store.ConflictReplaceExceptSchedule)
	arepl.State, arepl.ScheduledAt = store.StateScheduled, later
	insert(t, s, arepl)
	an := get(t, s, arepl.ID)
	require.Equal(t, store.StateScheduled, an.State)
	requireTimeEqual(t, later, an.ScheduledAt)
	require.Equal(t, store.StateCancelled, get(t, s, a.ID).State)
}

func testUniqueStates(t *testing.T, s store.Store) {
	q := uniq("unique-states")

	// Held in completed: a completed holder still blocks.
	key := uniq("key")
	p := uniqueJob(q, key, "")
	p.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}
	a := active(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted}))
	blocked := uniqueJob(q, key, "")
	blocked.UniqueStates = p.UniqueStates
	_, err := s.Insert(ctx(t), []*store.InsertParams{blocked})
	requireConflict(t, err, key, a.ID, store.StateCompleted)

	// Not held in completed: once the holder completes, the key is free.
	key2 := uniq("key")
	p2 := uniqueJob(q, key2, "")
	p2.UniqueStates = []store.State{store.StateAvailable, store.StateActive}
	a2 := active(t, s, p2)
	second := uniqueJob(q, key2, "")
	second.UniqueStates = p2.UniqueStates
	_, err = s.Insert(ctx(t), []*store.InsertParams{second})
	requireConflict(t, err, key2, a2.ID, store.StateActive)
	require.True(t, finish(t, s, store.Completion{ID: a2.ID, Attempt: 1, State: store.StateCompleted}))
	insert(t, s, second)

	// Held only while available: claiming the holder frees the key.
	key3 := uniq("key")
	p3 := uniqueJob(q, key3, "")
	p3.UniqueStates = []store.State{store.StateAvailable}
	p3.Kind = uniq("kind")
	insert(t, s, p3)
	third := uniqueJob(q, key3, "")
	third.UniqueStates = p3.UniqueStates
	_, err = s.Insert(ctx(t), []*store.InsertParams{third})
	requireConflict(t, err, key3, p3.ID, store.StateAvailable)
	reclaim(t, s, q, p3.Kind, p3.ID, worker, lease)
	insert(t, s, third)
}

func testUniqueDefaultStates(t *testing.T, s store.Store) {
	q := uniq("unique-default")
	for _, st := range []store.State{store.StateScheduled, store.StatePending, store.StateRetryable} {
		key := uniq("key")
		p := uniqueJob(q, key, "")
		p.Kind = uniq("kind")
		switch st {
		case store.StateScheduled:
			p.State, p.ScheduledAt = st, time.Now().Add(time.Hour)
			insert(t, s, p)
		case store.StatePending:
			p.State = st
			insert(t, s, p)
		case store.StateRetryable:
			insert(t, s, p)
			reclaim(t, s, q, p.Kind, p.ID, worker, lease)
			require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: 1, State: st, ScheduledAt: time.Now().Add(time.Hour)}))
		}
		_, err := s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
		requireConflict(t, err, key, p.ID, st)
	}

	// Available and active hold the key; every terminal state frees it.
	for _, end := range []store.State{store.StateCompleted, store.StateCancelled, store.StateDiscarded} {
		key := uniq("key")
		p := uniqueJob(q, key, "")
		p.Kind = uniq("kind")
		insert(t, s, p)
		_, err := s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
		requireConflict(t, err, key, p.ID, store.StateAvailable)
		reclaim(t, s, q, p.Kind, p.ID, worker, lease)
		_, err = s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
		requireConflict(t, err, key, p.ID, store.StateActive)
		require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: 1, State: end}))
		insert(t, s, uniqueJob(q, key, ""))
	}

	// A job cancelled while queued frees its key too.
	key := uniq("key")
	p := insert(t, s, uniqueJob(q, key, ""))[0]
	_, err := s.CancelJob(ctx(t), p.ID)
	require.NoError(t, err)
	insert(t, s, uniqueJob(q, key, ""))
}

func testUniqueUntil(t *testing.T, s store.Store) {
	q := uniq("unique-until")
	key := uniq("key")
	until := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	p := uniqueJob(q, key, "")
	p.UniqueUntil = until
	p.State, p.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	insert(t, s, p)

	next := uniqueJob(q, key, "")
	_, err := s.Insert(ctx(t), []*store.InsertParams{next})
	if time.Now().Before(until.Add(-50 * time.Millisecond)) {
		requireConflict(t, err, key, p.ID, store.StateScheduled)
	}
	eventually(t, "the key's period to run out", func() bool {
		_, err := s.Insert(ctx(t), []*store.InsertParams{next})
		if err == nil {
			return true
		}
		require.ErrorIs(t, err, store.ErrUniqueConflict)
		return false
	})
	require.False(t, time.Now().Before(until.Add(-precision)), "the key was held until UniqueUntil")
	old := get(t, s, p.ID)
	require.Empty(t, old.UniqueKey, "the lapsed holder's key is cleared by the insert that took it over")
	require.Equal(t, store.StateScheduled, old.State, "the lapsed holder is otherwise untouched")
	require.Equal(t, key, get(t, s, next.ID).UniqueKey)

	// The new holder, without a period, holds the key.
	_, err = s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
	requireConflict(t, err, key, next.ID, store.StateAvailable)
}

func testUniqueWithinBatch(t *testing.T, s store.Store) {
	q := uniq("unique-batch")
	key := uniq("key")

	first, second := uniqueJob(q, key, ""), uniqueJob(q, key, store.ConflictReject)
	_, err := s.Insert(ctx(t), []*store.InsertParams{first, second})
	requireConflict(t, err, key, first.ID, store.StateAvailable)
	requireAbsent(t, s, first.ID, second.ID)

	first, second = uniqueJob(q, key, ""), uniqueJob(q, key, store.ConflictIgnore)
	jobs, err := s.Insert(ctx(t), []*store.InsertParams{first, second})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, first.ID, jobs[0].ID)
	require.False(t, jobs[0].Duplicate)
	require.Equal(t, first.ID, jobs[1].ID, "the batch's earlier job holds the key")
	require.True(t, jobs[1].Duplicate)
	requireAbsent(t, s, second.ID)

	key2 := uniq("key")
	first, second = uniqueJob(q, key2, ""), uniqueJob(q, key2, store.ConflictReplace)
	jobs, err = s.Insert(ctx(t), []*store.InsertParams{first, second})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, second.ID, jobs[1].ID)
	require.Equal(t, store.StateCancelled, get(t, s, first.ID).State, "the batch's later job replaces the earlier")
	require.Equal(t, store.StateAvailable, get(t, s, second.ID).State)
	require.Equal(t, store.StateCancelled, jobs[0].State, "the replaced job of the batch is returned as stored")
	require.Empty(t, jobs[0].Replaced)
	requireReplaced(t, jobs[1], first.ID, store.StateAvailable)

	// A chain within a batch: each job names only the one it replaced, the stored holder included.
	key3 := uniq("key")
	held := insert(t, s, uniqueJob(q, key3, ""))[0]
	first, second = uniqueJob(q, key3, store.ConflictReplace), uniqueJob(q, key3, store.ConflictReplace)
	jobs, err = s.Insert(ctx(t), []*store.InsertParams{first, second})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.Equal(t, store.StateCancelled, jobs[0].State)
	requireReplaced(t, jobs[0], held.ID, store.StateAvailable)
	requireReplaced(t, jobs[1], first.ID, store.StateAvailable)
}

// requireReplaced checks that j, returned by a replacing insert, names exactly the job id as the one
// it cancelled, as it was before: in state was.
func requireReplaced(t testing.TB, j *store.Job, id string, was store.State) {
	t.Helper()
	require.Len(t, j.Replaced, 1, "the jobs job %s replaced", j.ID)
	require.Equal(t, id, j.Replaced[0].ID)
	require.Equal(t, was, j.Replaced[0].State, "the replaced job as it was before the cancel")
}

func testUniqueConcurrent(t *testing.T, h Harness) {
	const inserters = 16
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	for _, policy := range []store.OnConflict{store.ConflictReject, store.ConflictIgnore} {
		q := uniq("unique-race")
		key := uniq("key")
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, inserters)
			got   = make([][]*store.Job, inserters)
			ps    = make([]*store.InsertParams, inserters)
		)
		for i := range inserters {
			ps[i] = uniqueJob(q, key, policy)
			st := s1
			if i%2 == 1 {
				st = s2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = st.Insert(ctx(t), []*store.InsertParams{ps[i]})
			}()
		}
		close(start)
		wg.Wait()

		stored := queueJobs(t, s1, q)
		require.Len(t, stored, 1, "%s: exactly one job holds the key", policy)
		winner := stored[0].ID
		won := 0
		for i := range inserters {
			switch policy {
			case store.ConflictReject:
				if errs[i] == nil {
					won++
					require.Equal(t, winner, ps[i].ID)
					continue
				}
				requireConflict(t, errs[i], key, winner, store.StateAvailable)
			case store.ConflictIgnore:
				require.NoError(t, errs[i])
				require.Len(t, got[i], 1)
				require.Equal(t, winner, got[i][0].ID, "every inserter gets the one stored job")
				if !got[i][0].Duplicate {
					won++
					require.Equal(t, winner, ps[i].ID)
				}
			}
		}
		require.Equal(t, 1, won, "%s: exactly one insert succeeds", policy)
	}
}

func testInsertRefusesWorkflowFields(t *testing.T, s store.Store) {
	q := uniq("plain")
	for name, mutate := range map[string]func(*store.InsertParams){
		"workflow id": func(p *store.InsertParams) { p.WorkflowID = uuidv7.New() },
		"parent ids": func(p *store.InsertParams) {
			p.ParentIDs = []string{uuidv7.New()}
			p.State = store.StatePending
		},
		"run on":      func(p *store.InsertParams) { p.RunOn = store.RunOnSuccess },
		"on conflict": func(p *store.InsertParams) { p.OnConflict = "overwrite"; p.UniqueKey = "k" },
	} {
		ok, bad := job(q), job(q)
		mutate(bad)
		_, err := s.Insert(ctx(t), []*store.InsertParams{ok, bad})
		require.ErrorIs(t, err, store.ErrInvalidParams, name)
		requireAbsent(t, s, ok.ID, bad.ID)
	}
	require.Empty(t, queueJobs(t, s, q))
}

func testUniqueRoundTrip(t *testing.T, s store.Store) {
	q := uniq("unique-fields")
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	p := uniqueJob(q, uniq("key"), store.ConflictReject)
	p.UniqueStates = []store.State{store.StateAvailable, store.StateScheduled, store.StateCompleted}
	p.UniqueUntil = until
	for _, j := range []*store.Job{insert(t, s, p)[0], get(t, s, p.ID)} {
		require.Equal(t, p.UniqueKey, j.UniqueKey)
		require.ElementsMatch(t, p.UniqueStates, j.UniqueStates)
		requireTimeEqual(t, until, j.UniqueUntil, "unique_until")
		require.False(t, j.Duplicate)
	}

	// Without states, the job reports none or the defaults; without a period, a zero UniqueUntil.
	d := uniqueJob(q, uniq("key"), "")
	insert(t, s, d)
	j := get(t, s, d.ID)
	if len(j.UniqueStates) > 0 {
		require.ElementsMatch(t, store.DefaultUniqueStates, j.UniqueStates)
	}
	require.True(t, j.UniqueUntil.IsZero())
	require.Equal(t, d.UniqueKey, j.UniqueKey)
}

// testUniqueManualReentry: RetryJob and ActivateJob, which bring a job back into its unique states
// by hand, are refused while another job holds its key, and leave the job as it was.
func testUniqueManualReentry(t *testing.T, s store.Store) {
	q, key := uniq("unique-reentry"), uniq("key")
	first := insert(t, s, uniqueJob(q, key, ""))[0]
	_, err := s.CancelJob(ctx(t), first.ID)
	require.NoError(t, err)
	holder := insert(t, s, uniqueJob(q, key, ""))[0] // the key was free: the first job is cancelled

	_, err = s.RetryJob(ctx(t), first.ID)
	requireConflict(t, err, key, holder.ID, store.StateAvailable)
	require.Equal(t, store.StateCancelled, get(t, s, first.ID).State, "a refused retry changes nothing")

	// With unique states [available], a pending job does not hold its key; activating it while an
	// available job holds the key is refused.
	key2 := uniq("key")
	waiting := uniqueJob(q, key2, "")
	waiting.State, waiting.UniqueStates = store.StatePending, []store.State{store.StateAvailable}
	availableHolder := uniqueJob(q, key2, "")
	availableHolder.UniqueStates = []store.State{store.StateAvailable}
	insert(t, s, waiting, availableHolder)
	_, err = s.ActivateJob(ctx(t), waiting.ID)
	requireConflict(t, err, key2, availableHolder.ID, store.StateAvailable)
	require.Equal(t, store.StatePending, get(t, s, waiting.ID).State, "a refused activation changes nothing")

	// Once the holder is cancelled, the first job's retry takes the key back.
	_, err = s.CancelJob(ctx(t), holder.ID)
	require.NoError(t, err)
	retried, err := s.RetryJob(ctx(t), first.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, retried.State)
	require.Equal(t, key, get(t, s, first.ID).UniqueKey, "the retried job holds its key again")
	_, err = s.Insert(ctx(t), []*store.InsertParams{uniqueJob(q, key, "")})
	requireConflict(t, err, key, first.ID, store.StateAvailable)
}

// testUniqueHeldAfterClaim: a job that took its key while outside its unique states holds it once
// a claim moves it into them, even after a later job took the same (then free) key; a third job
// then meets it. The later job, claimed in its turn, gives its key up (store/features.go). The
// memory store once let the third job in, two jobs holding one key.
func testUniqueHeldAfterClaim(t *testing.T, s store.Store) {
	q, key := uniq("unique-held-after-claim"), uniq("key")
	first := uniqueJob(q, key, "")
	first.UniqueStates = []store.State{store.StateActive}
	insert(t, s, first)
	second := uniqueJob(q, key, "")
	second.UniqueStates = []store.State{store.StateActive}
	insert(t, s, second) // the first job is available, outside its states: the key is free

	c := claim(t, s, q, 1)
	require.Equal(t, []string{first.ID}, ids(c))
	require.Equal(t, key, get(t, s, first.ID).UniqueKey, "nobody held the key: the claimed job keeps it")

	third := uniqueJob(q, key, "")
	_, err := s.Insert(ctx(t), []*store.InsertParams{third})
	requireConflict(t, err, key, first.ID, store.StateActive)

	c = claim(t, s, q, 1)
	require.Equal(t, []string{second.ID}, ids(c), "a claim never fails for uniqueness")
	_, err = s.Insert(ctx(t), []*store.InsertParams{third})
	requireConflict(t, err, key, first.ID, store.StateActive)

	// Once the first job leaves its states, the key is free again (the second gave it up).
	require.True(t, finish(t, s, store.Completion{ID: first.ID, Attempt: 1, Token: get(t, s, first.ID).ClaimToken, State: store.StateCompleted}))
	insert(t, s, third)
}

// testUniqueReplaceTerminalHolder: ConflictReplace meeting a holder in a terminal state (its
// UniqueStates include completed) takes the key without touching the holder: a terminal job stays
// terminal (store.State.Terminal). Redis once cancelled the completed holder.
func testUniqueReplaceTerminalHolder(t *testing.T, s store.Store) {
	q, key := uniq("unique-replace-terminal"), uniq("key")
	p := uniqueJob(q, key, "")
	p.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCompleted}
	a := active(t, s, p)
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, Token: a.ClaimToken, State: store.StateCompleted,
		Result: json.RawMessage(`"done"`)}))
	before := get(t, s, a.ID)

	repl := uniqueJob(q, key, store.ConflictReplace)
	require.Empty(t, insert(t, s, repl)[0].Replaced, "a terminal holder is not cancelled, so not listed")
	require.Equal(t, store.StateAvailable, get(t, s, repl.ID).State)
	after := get(t, s, a.ID)
	require.Equal(t, store.StateCompleted, after.State, "a completed holder is not cancelled")
	require.WithinDuration(t, before.CompletedAt, after.CompletedAt, precision, "its completed_at stands")
	require.JSONEq(t, `"done"`, string(after.Result))

	// The key went to the new job.
	again := uniqueJob(q, key, "")
	_, err := s.Insert(ctx(t), []*store.InsertParams{again})
	requireConflict(t, err, key, repl.ID, store.StateAvailable)
}

// testUniqueInsertOutsideOwnStates: a unique job inserted in a state outside its own unique states
// (scheduled, pending) holds nothing yet, but it is still not inserted while another job holds its
// key: it meets the holder under its policy like any insert. Within a batch, such a job meets the
// jobs before it and holds nothing for the jobs after it. PostgreSQL and SQLite once stored it
// beside the holder.
func testUniqueInsertOutsideOwnStates(t *testing.T, s store.Store) {
	q := uniq("unique-outside")
	avail := []store.State{store.StateAvailable}
	outside := func(key string, st store.State, policy store.OnConflict) *store.InsertParams {
		p := uniqueJob(q, key, policy)
		p.UniqueStates, p.State = avail, st
		if st == store.StateScheduled {
			p.ScheduledAt = time.Now().Add(time.Hour)
		}
		return p
	}
	holderOf := func(key string) *store.Job {
		p := uniqueJob(q, key, "")
		p.UniqueStates = avail
		return insert(t, s, p)[0]
	}

	for _, st := range []store.State{store.StateScheduled, store.StatePending} {
		key := uniq("key")
		h := holderOf(key)
		refused := outside(key, st, store.ConflictReject)
		_, err := s.Insert(ctx(t), []*store.InsertParams{refused})
		requireConflict(t, err, key, h.ID, store.StateAvailable)
		requireAbsent(t, s, refused.ID)

		ignored := outside(key, st, store.ConflictIgnore)
		jobs, err := s.Insert(ctx(t), []*store.InsertParams{ignored})
		require.NoError(t, err)
		require.Equal(t, h.ID, jobs[0].ID, "%s: the holder is returned in the job's place", st)
		require.True(t, jobs[0].Duplicate)
		requireAbsent(t, s, ignored.ID)

		repl := outside(key, st, store.ConflictReplace)
		insert(t, s, repl)
		require.Equal(t, store.StateCancelled, get(t, s, h.ID).State, "%s: the holder is replaced", st)
		require.Equal(t, st, get(t, s, repl.ID).State)
	}

	// A lapsed holder holds nothing: the job is inserted and the holder gives the key up.
	key := uniq("key")
	lapsing := uniqueJob(q, key, "")
	lapsing.UniqueStates, lapsing.UniqueUntil = avail, time.Now().Add(200*time.Millisecond)
	insert(t, s, lapsing)
	eventually(t, "the holder's period to run out", func() bool {
		return time.Now().After(lapsing.UniqueUntil.Add(precision))
	})
	insert(t, s, outside(key, store.StateScheduled, ""))

	// In a batch, the job outside its states meets an earlier job of the batch holding the key, and
	// holds nothing against a later one.
	key = uniq("key")
	first := uniqueJob(q, key, "")
	first.UniqueStates = avail
	_, err := s.Insert(ctx(t), []*store.InsertParams{first, outside(key, store.StateScheduled, "")})
	requireConflict(t, err, key, first.ID, store.StateAvailable)
	requireAbsent(t, s, first.ID)
	later := uniqueJob(q, key, "")
	later.UniqueStates = avail
	insert(t, s, outside(key, store.StatePending, ""), later)
	_, err = s.Insert(ctx(t), []*store.InsertParams{outside(key, store.StateScheduled, "")})
	requireConflict(t, err, key, later.ID, store.StateAvailable)
}

// testUniqueLapsedHolderReentry: a job coming back into its unique states (its run returned it to
// available, a promotion, a rescue, a claim into active) takes its key back when the only other job with the key is a
// holder whose period ran out, which holds nothing: the next insert with the key meets it.
// PostgreSQL and SQLite once made the returning job give its key up, and let a third job in.
func testUniqueLapsedHolderReentry(t *testing.T, s store.Store) {
	avail := []store.State{store.StateAvailable}
	for _, via := range []string{"finish", "promote", "rescue", "claim"} {
		q, key := uniq("unique-lapsed-reentry"), uniq("key")
		b := uniqueJob(q, key, "")
		b.UniqueStates = avail
		back := store.StateAvailable // B's state once back in its unique states
		var claimed *store.Job
		switch via {
		case "finish":
			claimed = active(t, s, b) // active is not among its states: it holds nothing
		case "promote":
			b.State, b.ScheduledAt = store.StateScheduled, time.Now().Add(300*time.Millisecond)
			insert(t, s, b)
		case "rescue":
			claimed = activeFor(t, s, b, "dead-worker", 100*time.Millisecond)
		case "claim":
			b.Kind, b.UniqueStates, back = uniq("kind"), []store.State{store.StateActive}, store.StateActive
			insert(t, s, b) // available is not among its states: it holds nothing
		}

		// A takes the free key with a short period, which runs out.
		a := uniqueJob(q, key, "")
		a.UniqueStates, a.UniqueUntil = avail, time.Now().Add(200*time.Millisecond)
		insert(t, s, a)
		eventually(t, "the period of A to run out", func() bool { return time.Now().After(a.UniqueUntil.Add(precision)) })

		switch via {
		case "finish":
			require.True(t, finish(t, s, store.Completion{ID: b.ID, Attempt: 1, Token: claimed.ClaimToken, State: store.StateAvailable}))
		case "promote":
			eventually(t, "B to be promoted", func() bool {
				_, err := s.Promote(ctx(t), 100)
				require.NoError(t, err)
				return get(t, s, b.ID).State == store.StateAvailable
			})
		case "rescue":
			eventually(t, "B to be rescued", func() bool {
				_, err := s.Rescue(ctx(t), store.RescueParams{Limit: 100})
				require.NoError(t, err)
				return get(t, s, b.ID).State == store.StateAvailable
			})
		case "claim":
			reclaim(t, s, q, b.Kind, b.ID, worker, lease)
		}
		require.Equal(t, key, get(t, s, b.ID).UniqueKey, "%s: B holds its key again", via)
		c := uniqueJob(q, key, "")
		c.UniqueStates = avail
		_, err := s.Insert(ctx(t), []*store.InsertParams{c})
		requireConflict(t, err, key, b.ID, back)
	}
}
