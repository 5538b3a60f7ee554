package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

func TestSingleJobTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)

	requireTransition := func(err error, op string, from store.State) {
		t.Helper()
		require.ErrorIs(t, err, store.ErrInvalidTransition)
		var te *store.TransitionError
		require.True(t, errors.As(err, &te))
		require.Equal(t, op, te.Operation)
		require.Equal(t, from, te.From)
	}

	p := params("q")
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)

	// Retry and activate refuse an available job; delete of an active one is refused.
	_, err = s.RetryJob(ctx, p.ID)
	requireTransition(err, "retry", store.StateAvailable)
	_, err = s.ActivateJob(ctx, p.ID)
	requireTransition(err, "activate", store.StateAvailable)
	_, err = s.Claim(ctx, claimParams("q", 1))
	require.NoError(t, err)
	_, err = s.DeleteJob(ctx, p.ID)
	requireTransition(err, "delete", store.StateActive)

	// Fail it for good, then retry: available again, attempts reset, history kept.
	_, err = s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: 1, State: store.StateDiscarded,
		Error: &store.AttemptError{Attempt: 1, At: time.Now(), Message: "no"}}})
	require.NoError(t, err)
	_, err = s.CancelJob(ctx, p.ID)
	requireTransition(err, "cancel", store.StateDiscarded)
	j, err := s.RetryJob(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.Equal(t, 0, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.True(t, j.CompletedAt.IsZero())
	claimed, err := s.Claim(ctx, claimParams("q", 1))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 1, claimed[0].Attempt)

	// Cancel the active job, retry it, delete it.
	j, err = s.CancelJob(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)
	require.False(t, j.CompletedAt.IsZero())
	require.Empty(t, j.WorkerID)
	_, err = s.CancelJob(ctx, p.ID)
	requireTransition(err, "cancel", store.StateCancelled)
	j, err = s.DeleteJob(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State, "returned as it was")
	_, err = s.GetJob(ctx, p.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	// Missing or malformed ids.
	for _, id := range []string{uuidv7.New(), "nope"} {
		_, err = s.CancelJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.RetryJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.ActivateJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.DeleteJob(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}

	// Pending → available.
	pending := params("q")
	pending.State = store.StatePending
	_, err = s.Insert(ctx, []*store.InsertParams{pending})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Empty(t, jobs, "pending jobs are not claimable")
	j, err = s.ActivateJob(ctx, pending.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	_, err = s.ActivateJob(ctx, pending.ID)
	requireTransition(err, "activate", store.StateAvailable)
}

func TestCancelRacesWithFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	const n = 200
	batch := make([]*store.InsertParams, n)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, claimParams("q", n))
	require.NoError(t, err)
	require.Len(t, jobs, n)

	var (
		wg        sync.WaitGroup
		cancelled = make([]bool, n)
		finished  []store.FinishResult
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i, j := range jobs {
			_, err := s.CancelJob(ctx, j.ID)
			if err == nil {
				cancelled[i] = true
			} else {
				require.ErrorIs(t, err, store.ErrInvalidTransition)
			}
		}
	}()
	go func() {
		defer wg.Done()
		comps := make([]store.Completion, n)
		for i, j := range jobs {
			comps[i] = store.Completion{ID: j.ID, Attempt: 1, State: store.StateCompleted}
		}
		var err error
		finished, err = s.Finish(ctx, comps)
		require.NoError(t, err)
	}()
	wg.Wait()
	for i, j := range jobs {
		require.NotEqual(t, cancelled[i], finished[i].Applied, "job %d: exactly one of cancel and finish wins", i)
		got, err := s.GetJob(ctx, j.ID)
		require.NoError(t, err)
		if cancelled[i] {
			require.Equal(t, store.StateCancelled, got.State)
		} else {
			require.Equal(t, store.StateCompleted, got.State)
		}
	}
}

func TestHeartbeatRescuePromote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)

	a, b, c := params("q"), params("q"), params("q")
	c.MaxAttempts = 1
	_, err := s.Insert(ctx, []*store.InsertParams{a, b, c})
	require.NoError(t, err)
	p := claimParams("q", 3)
	p.LeaseDuration = 50 * time.Millisecond
	jobs, err := s.Claim(ctx, p)
	require.NoError(t, err)
	require.Len(t, jobs, 3)

	// Heartbeat a for another worker's id list: b by the wrong worker is lost, unknown ids are lost.
	stranger := uuidv7.New()
	lost, err := s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w1", IDs: []string{a.ID, stranger, "junk"}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{stranger, "junk"}, lost)
	lost, err = s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w2", IDs: []string{b.ID}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []string{b.ID}, lost)

	time.Sleep(100 * time.Millisecond)
	res, err := s.Rescue(ctx, store.RescueParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Requeued, 1)
	require.Equal(t, b.ID, res.Requeued[0].ID)
	require.Equal(t, store.StateAvailable, res.Requeued[0].State)
	require.Len(t, res.Requeued[0].Errors, 1)
	e := res.Requeued[0].Errors[0]
	require.Equal(t, "lease_expired", e.Type)
	require.Equal(t, 1, e.Attempt)
	require.Equal(t, "lease expired: worker w1 stopped heartbeating", e.Message)
	require.WithinDuration(t, time.Now(), e.At, 5*time.Second)
	require.Len(t, res.Discarded, 1)
	require.Equal(t, c.ID, res.Discarded[0].ID)
	require.Equal(t, store.StateDiscarded, res.Discarded[0].State)
	require.False(t, res.Discarded[0].CompletedAt.IsZero())

	lost, err = s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w1", IDs: []string{a.ID, b.ID}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Equal(t, []string{b.ID}, lost, "a rescued job is lost to its old worker")
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 2 }) // insert + rescue

	// Promote: a retryable job already due becomes available.
	res2, err := s.Finish(ctx, []store.Completion{{ID: a.ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: time.Now().Add(-time.Second)}})
	require.NoError(t, err)
	require.True(t, res2[0].Applied)
	n, err := s.Promote(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	j, err := s.GetJob(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	n, err = s.Promote(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestListJobsPaging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	var all []string
	for i := range 25 {
		p := params(fmt.Sprintf("q%d", i%2))
		if i%5 == 0 {
			p.Kind = "special"
		}
		_, err := s.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		all = append(all, p.ID)
	}
	var got []string
	cursor := ""
	for {
		page, next, err := s.ListJobs(ctx, store.ListParams{Limit: 10, After: cursor})
		require.NoError(t, err)
		got = append(got, ids(page)...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, all, got)

	page, next, err := s.ListJobs(ctx, store.ListParams{Limit: 3, Descending: true})
	require.NoError(t, err)
	require.Equal(t, []string{all[24], all[23], all[22]}, ids(page))
	page, _, err = s.ListJobs(ctx, store.ListParams{Limit: 3, Descending: true, After: next})
	require.NoError(t, err)
	require.Equal(t, []string{all[21], all[20], all[19]}, ids(page))

	page, next, err = s.ListJobs(ctx, store.ListParams{Kinds: []string{"special"}, Queues: []string{"q0"}})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, []string{all[0], all[10], all[20]}, ids(page))

	page, _, err = s.ListJobs(ctx, store.ListParams{States: []store.State{store.StateCompleted}})
	require.NoError(t, err)
	require.Empty(t, page)
	page, next, err = s.ListJobs(ctx, store.ListParams{Limit: 25})
	require.NoError(t, err)
	require.Len(t, page, 25)
	require.Empty(t, next, "an exactly full last page has no next cursor")
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	batch := make([]*store.InsertParams, 30)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, claimParams("q", 30))
	require.NoError(t, err)
	states := []store.State{store.StateCompleted, store.StateCancelled, store.StateDiscarded}
	comps := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		comps[i] = store.Completion{ID: j.ID, Attempt: 1, State: states[i%3]}
	}
	_, err = s.Finish(ctx, comps)
	require.NoError(t, err)

	future := time.Now().Add(time.Hour)
	n, err := s.Cleanup(ctx, store.CleanupParams{Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "zero times keep everything")
	n, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: time.Now().Add(-time.Hour), Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: future, Limit: 4})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = s.Cleanup(ctx, store.CleanupParams{CompletedBefore: future, DiscardedBefore: future, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 16, n)
	queues, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.EqualValues(t, 10, queues[0].Counts[store.StateCancelled])
	require.EqualValues(t, 0, queues[0].Counts[store.StateCompleted])
}

func TestElectAndResign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	ok, err := s.Elect(ctx, "maint", "a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Elect(ctx, "maint", "b", time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.Elect(ctx, "maint", "a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "the leader renews")
	ok, err = s.Elect(ctx, "other", "b", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "names are independent")

	require.NoError(t, s.Resign(ctx, "maint", "b")) // not the leader: nothing happens
	ok, err = s.Elect(ctx, "maint", "b", time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, s.Resign(ctx, "maint", "a"))
	ok, err = s.Elect(ctx, "maint", "b", 30*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(60 * time.Millisecond)
	ok, err = s.Elect(ctx, "maint", "a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "an expired leader is replaced")
}

func TestConcurrentClaimersNeverShareAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	const (
		total    = 5000
		claimers = 6
	)
	producer := newStore(t, testdb.NewPool(t, 4), schema)
	batch := make([]*store.InsertParams, total)
	for i := range batch {
		batch[i] = params("q")
		batch[i].Priority = i % 3
	}
	_, err := producer.Insert(ctx, batch)
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		claimed = map[string]string{}
		wg      sync.WaitGroup
		errs    = make(chan error, claimers)
	)
	for w := range claimers {
		st, err := New(testdb.NewPool(t, 2), Config{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		worker := fmt.Sprintf("w%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := st.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 37, WorkerID: worker, LeaseDuration: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				comps := make([]store.Completion, len(jobs))
				mu.Lock()
				for i, j := range jobs {
					if prev, dup := claimed[j.ID]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("job %s claimed by %s and %s", j.ID, prev, worker)
						return
					}
					claimed[j.ID] = worker
					comps[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
				}
				mu.Unlock()
				res, err := st.Finish(ctx, comps)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range res {
					if !r.Applied {
						errs <- fmt.Errorf("completion of %s not applied", r.ID)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, claimed, total)
	queues, err := producer.ListQueues(ctx)
	require.NoError(t, err)
	require.EqualValues(t, total, queues[0].Counts[store.StateCompleted])
}
