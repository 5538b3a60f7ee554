package pronto_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

func TestInsertAndWork(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		got := make(chan echoArgs, 1)
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			require.NoError(t, pronto.RecordResult(ctx, map[string]int{"doubled": j.Args.N * 2}))
			got <- j.Args
			return nil
		}))
		c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(5)))
		events, unsub := c.Subscribe(pronto.EventCompleted)
		defer unsub()

		job, err := c.Insert(ctx, echoArgs{Message: "hi", N: 21}, &pronto.InsertOpts{Tags: []string{"a"}, Meta: map[string]any{"trace": "x"}})
		require.NoError(t, err)
		require.Equal(t, "test.echo", job.Kind)
		require.Equal(t, pronto.DefaultQueue, job.Queue)
		require.JSONEq(t, `[{"message":"hi","n":21}]`, string(job.Args), "typed args are the one element of the OJS args array")

		select {
		case a := <-got:
			require.Equal(t, echoArgs{Message: "hi", N: 21}, a)
		case <-time.After(10 * time.Second):
			t.Fatal("job never ran")
		}
		select {
		case e := <-events:
			require.Equal(t, job.ID, e.Job.ID)
			require.Equal(t, pronto.StateCompleted, e.Job.State)
		case <-time.After(10 * time.Second):
			t.Fatal("no completed event")
		}
		done := waitState(t, c, job.ID, pronto.StateCompleted)
		require.Equal(t, 1, done.Attempt)
		require.JSONEq(t, `{"doubled":42}`, string(done.Result))
		require.False(t, done.CompletedAt.IsZero())
		require.Equal(t, []string{"a"}, done.Tags)
		require.JSONEq(t, `{"trace":"x"}`, string(done.Meta))
	})
}

// failWorker fails according to its args: FailTimes attempts fail in Mode, then it succeeds.
func failWorker() pronto.Worker[failArgs] {
	return pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[failArgs]) error {
		if j.Attempt > j.Args.FailTimes {
			return nil
		}
		switch j.Args.Mode {
		case "panic":
			panic("worker exploded")
		case "cancel":
			return pronto.Cancel(errors.New("not wanted"))
		case "discard":
			return pronto.Discard(errors.New("hopeless"))
		case "snooze":
			return pronto.Snooze(50 * time.Millisecond)
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		}
		return fmt.Errorf("attempt %d failed", j.Attempt)
	})
}

func TestWorkerOutcomes(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, failWorker())
		var panics atomic.Int32
		// No lease is tested here: a one-minute lease, so that a loaded machine cannot let a run's
		// lease lapse before its outcome is written (the rescued job then runs again and completes).
		cfg := heldConfig(workers, defaultQueue(10))
		cfg.OnPanic = func(context.Context, *pronto.JobRow, any, string) { panics.Add(1) }
		c := startClient(t, ts.Store, cfg)

		insert := func(a failArgs, opts *pronto.InsertOpts) string {
			j, err := c.Insert(ctx, a, opts)
			require.NoError(t, err)
			return j.ID
		}
		retried := insert(failArgs{FailTimes: 1, Mode: "error"}, nil)
		exhausted := insert(failArgs{FailTimes: 10, Mode: "error"}, &pronto.InsertOpts{MaxAttempts: 2})
		panicked := insert(failArgs{FailTimes: 1, Mode: "panic"}, nil)
		cancelled := insert(failArgs{FailTimes: 1, Mode: "cancel"}, nil)
		discarded := insert(failArgs{FailTimes: 1, Mode: "discard"}, nil)
		snoozed := insert(failArgs{FailTimes: 2, Mode: "snooze"}, &pronto.InsertOpts{MaxAttempts: 1})
		timedOut := insert(failArgs{FailTimes: 1, Mode: "timeout"}, &pronto.InsertOpts{Timeout: 50 * time.Millisecond})

		j := waitState(t, c, retried, pronto.StateCompleted)
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "attempt 1 failed", j.Errors[0].Message)
		require.Equal(t, 1, j.Errors[0].Attempt)

		j = waitState(t, c, exhausted, pronto.StateDiscarded)
		require.Equal(t, 2, j.Attempt)
		require.Len(t, j.Errors, 2)

		j = waitState(t, c, panicked, pronto.StateCompleted)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "panic", j.Errors[0].Type)
		require.Contains(t, j.Errors[0].Message, "worker exploded")
		require.Contains(t, j.Errors[0].Trace, "goroutine", "a panic records its stack")
		require.EqualValues(t, 1, panics.Load())

		j = waitState(t, c, cancelled, pronto.StateCancelled)
		require.Equal(t, 1, j.Attempt)
		require.Contains(t, j.Errors[0].Message, "not wanted")

		j = waitState(t, c, discarded, pronto.StateDiscarded)
		require.Equal(t, 1, j.Attempt, "Discard skips the remaining attempts")

		// Snoozed twice with MaxAttempts 1: snoozes do not spend the attempt budget.
		j = waitState(t, c, snoozed, pronto.StateCompleted)
		require.Equal(t, 3, j.Attempt)
		require.Equal(t, 3, j.MaxAttempts, "each snooze refunds its attempt")
		require.Empty(t, j.Errors, "a snooze is not an error")

		j = waitState(t, c, timedOut, pronto.StateCompleted)
		require.Len(t, j.Errors, 1)
		require.Equal(t, "timeout", j.Errors[0].Type)
	})
}

func TestPriorityAndDueOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		log := newRunLog()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			log.add(j.Args.Message)
			return nil
		}))
		c, err := pronto.NewClient(ts.Store, fastConfig(workers, defaultQueue(1)))
		require.NoError(t, err)
		require.NoError(t, c.QueuePause(ctx, pronto.DefaultQueue))
		for _, x := range []struct {
			msg string
			pri int
		}{{"low-1", -10}, {"mid-1", 0}, {"high-1", 10}, {"mid-2", 0}, {"high-2", 10}, {"top", 100}, {"bottom", -100}} {
			_, err := c.Insert(ctx, echoArgs{Message: x.msg}, &pronto.InsertOpts{Priority: x.pri})
			require.NoError(t, err)
		}
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		time.Sleep(300 * time.Millisecond) // paused: nothing may run (checked below)
		order, _ := log.snapshot()
		require.Empty(t, order, "a paused queue must not be worked")
		require.NoError(t, c.QueueResume(ctx, pronto.DefaultQueue))
		require.Eventually(t, func() bool { o, _ := log.snapshot(); return len(o) == 7 }, 10*time.Second, 10*time.Millisecond)
		order, _ = log.snapshot()
		require.Equal(t, []string{"top", "high-1", "high-2", "mid-1", "mid-2", "low-1", "bottom"}, order)
	})
}

func TestScheduledJobRunsWhenDue(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		started := make(chan time.Time, 1)
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			started <- time.Now()
			return nil
		}))
		cfg := fastConfig(workers, defaultQueue(2))
		cfg.PollInterval = time.Hour // only the due-time timer may start it
		c := startClient(t, ts.Store, cfg)
		due := time.Now().Add(300 * time.Millisecond)
		j, err := c.Insert(ctx, echoArgs{Message: "later"}, &pronto.InsertOpts{ScheduledAt: due})
		require.NoError(t, err)
		require.Equal(t, pronto.StateScheduled, j.State)
		select {
		case at := <-started:
			require.False(t, at.Before(due), "a scheduled job must not start before its due time")
		case <-time.After(10 * time.Second):
			t.Fatal("scheduled job never ran (with the poll disabled, the due-time timer must start it)")
		}
		waitState(t, c, j.ID, pronto.StateCompleted)
	})
}

func TestCancelRunningJobFromAnotherClient(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		running := make(chan struct{})
		stoppedWith := make(chan error, 1)
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blockArgs]) error {
			close(running)
			<-ctx.Done()
			stoppedWith <- context.Cause(ctx)
			return ctx.Err()
		}))
		worker := startClient(t, ts.Store, fastConfig(workers, defaultQueue(1)))
		admin, err := pronto.NewClient(ts.reopen(t), nil)
		require.NoError(t, err)

		j, err := admin.Insert(ctx, blockArgs{Key: "x"}, nil)
		require.NoError(t, err)
		select {
		case <-running:
		case <-time.After(10 * time.Second):
			t.Fatal("job never started")
		}
		cancelled, err := admin.JobCancel(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCancelled, cancelled.State)
		select {
		case cause := <-stoppedWith:
			require.ErrorIs(t, cause, pronto.ErrJobCancelled)
		case <-time.After(10 * time.Second):
			t.Fatal("running job's context was not cancelled")
		}
		time.Sleep(300 * time.Millisecond) // let the worker's outcome be processed; it must not apply
		final, err := worker.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCancelled, final.State, "the worker's late outcome must not overwrite the cancellation")

		_, err = admin.JobCancel(ctx, j.ID)
		require.ErrorIs(t, err, pronto.ErrInvalidTransition)
		var te *pronto.TransitionError
		require.ErrorAs(t, err, &te)
		require.Equal(t, pronto.StateCancelled, te.From)

		retried, err := admin.JobRetry(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, retried.State)
		require.Equal(t, 0, retried.Attempt)
	})
}

func TestGracefulStopReturnsInterruptedJobs(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var started atomic.Int32
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blockArgs]) error {
			started.Add(1)
			if j.Args.Key == "quick" {
				time.Sleep(50 * time.Millisecond)
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}))
		c, err := pronto.NewClient(ts.Store, fastConfig(workers, defaultQueue(5)))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		quick, err := c.Insert(ctx, blockArgs{Key: "quick"}, nil)
		require.NoError(t, err)
		slow, err := c.Insert(ctx, blockArgs{Key: "slow"}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return started.Load() == 2 }, 10*time.Second, 5*time.Millisecond)

		stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		err = c.Stop(stopCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "Stop reports that it had to cancel jobs")

		q, err := c.JobGet(ctx, quick.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCompleted, q.State, "a job that finishes before the deadline completes")
		s, err := c.JobGet(ctx, slow.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, s.State, "an interrupted job goes back to available at once")
		require.Empty(t, s.Errors, "an interruption is not a failed attempt")
		require.Equal(t, 2, s.MaxAttempts, "the interrupted attempt is refunded")

		_, err = c.Insert(ctx, blockArgs{Key: "after"}, nil)
		require.NoError(t, err, "a stopped client can still insert")
		require.ErrorIs(t, c.Start(ctx), pronto.ErrClientStopped)
	})
}

func TestUnknownKindWaitsForAClientThatCanWorkIt(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		echoOnly := pronto.NewWorkers()
		pronto.AddWorker(echoOnly, pronto.WorkFunc(func(context.Context, *pronto.Job[echoArgs]) error { return nil }))
		c := startClient(t, ts.Store, fastConfig(echoOnly, defaultQueue(2)))
		other, err := c.Insert(ctx, blockArgs{Key: "k"}, nil)
		require.NoError(t, err, "inserting a kind this client has no worker for is allowed")
		mine, err := c.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		waitState(t, c, mine.ID, pronto.StateCompleted)
		time.Sleep(300 * time.Millisecond)
		j, err := c.JobGet(ctx, other.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, j.State, "a kind with no worker here is left for others, not failed")
		require.Equal(t, 0, j.Attempt)

		blockers := pronto.NewWorkers()
		pronto.AddWorker(blockers, pronto.WorkFunc(func(context.Context, *pronto.Job[blockArgs]) error { return nil }))
		startClient(t, ts.reopen(t), fastConfig(blockers, defaultQueue(2)))
		waitState(t, c, other.ID, pronto.StateCompleted)
	})
}

func TestBadInputIsRefusedAndStoresNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		cases := []struct {
			name string
			args pronto.JobArgs
			opts *pronto.InsertOpts
			want string
		}{
			{"args that do not encode", badArgs{C: make(chan int)}, nil, "do not encode"},
			{"invalid kind", badKind{}, nil, "kind"},
			{"invalid queue", echoArgs{}, &pronto.InsertOpts{Queue: "Bad Queue!"}, "queue name"},
			{"priority too high", echoArgs{}, &pronto.InsertOpts{Priority: 101}, "priority"},
			{"priority too low", echoArgs{}, &pronto.InsertOpts{Priority: -101}, "priority"},
			{"bad id", echoArgs{}, &pronto.InsertOpts{ID: "not-a-uuid"}, "UUIDv7"},
			{"schedule and delay", echoArgs{}, &pronto.InsertOpts{Delay: time.Second, ScheduledAt: time.Now().Add(time.Hour)}, "not both"},
			{"bad retry policy", echoArgs{}, &pronto.InsertOpts{RetryPolicy: &pronto.RetryPolicy{BackoffCoefficient: 0.5}}, "coefficient"},
			{"oversized args", echoArgs{Message: strings.Repeat("x", 2<<20)}, nil, "over the limit"},
		}
		for _, tc := range cases {
			_, err := c.Insert(ctx, tc.args, tc.opts)
			require.Error(t, err, tc.name)
			require.ErrorIs(t, err, pronto.ErrInvalidArgs, tc.name)
			require.Contains(t, err.Error(), tc.want, tc.name)
		}
		// A batch with one bad job stores none of them.
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{{Args: echoArgs{N: 1}}, {Args: echoArgs{}, Opts: &pronto.InsertOpts{Queue: "BAD"}}})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.Contains(t, err.Error(), "job 1 of 2")
		// A duplicate id fails the whole batch.
		good, err := c.Insert(ctx, echoArgs{N: 7}, nil)
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{{Args: echoArgs{N: 8}}, {Args: echoArgs{N: 9}, Opts: &pronto.InsertOpts{ID: good.ID}}})
		require.ErrorIs(t, err, pronto.ErrDuplicate)

		list, err := c.JobList(ctx, nil)
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1, "only the one good job is stored")

		// Illegal transitions through the API change nothing.
		_, err = c.JobRetry(ctx, good.ID)
		require.ErrorIs(t, err, pronto.ErrInvalidTransition, "an available job cannot be retried")
		_, err = c.JobActivate(ctx, good.ID)
		require.ErrorIs(t, err, pronto.ErrInvalidTransition, "an available job cannot be activated")
		_, err = c.JobGet(ctx, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
		require.ErrorIs(t, err, pronto.ErrNotFound)
		_, err = c.JobGet(ctx, "nonsense")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		j, err := c.JobGet(ctx, good.ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateAvailable, j.State)
		require.Equal(t, 0, j.Attempt)
		_, err = c.JobList(ctx, &pronto.JobListParams{States: []pronto.State{"exploded"}})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
	})
}

type badArgs struct{ C chan int }

func (badArgs) Kind() string { return "test.bad" }

type badKind struct{}

func (badKind) Kind() string { return "Not A Kind" }

func TestManyClientsNeverRunAJobTwice(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		const jobs = 3000
		log := newRunLog()
		var clients []*pronto.Client
		for i := 0; i < 4; i++ {
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
				log.add(j.ID)
				return nil
			}))
			s := ts.Store
			if i > 0 {
				s = ts.reopen(t)
			}
			cfg := fastConfig(workers, defaultQueue(20))
			// A long lease: this test is about claim exclusivity, so a heartbeat delayed by a loaded
			// machine must not let the rescuer hand a job out again (that is at-least-once, tested
			// elsewhere).
			cfg.LeaseDuration, cfg.HeartbeatInterval = 30*time.Second, time.Second
			clients = append(clients, startClient(t, s, cfg))
		}
		// Insert from several goroutines, singly and in batches, while all clients claim.
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				c := clients[g]
				for i := 0; i < jobs/4; {
					if i%50 == 0 {
						batch := make([]pronto.InsertManyParams, 50)
						for k := range batch {
							batch[k] = pronto.InsertManyParams{Args: echoArgs{N: i + k}}
						}
						_, err := c.InsertMany(ctx, batch)
						require.NoError(t, err)
						i += 50
						continue
					}
					_, err := c.Insert(ctx, echoArgs{N: i}, nil)
					require.NoError(t, err)
					i++
				}
			}(g)
		}
		wg.Wait()
		require.Eventually(t, func() bool {
			_, m := log.snapshot()
			return len(m) == jobs
		}, 60*time.Second, 20*time.Millisecond)
		_, m := log.snapshot()
		for id, n := range m {
			require.Equal(t, 1, n, "job %s ran %d times", id, n)
		}
		require.Eventually(t, func() bool {
			qs, err := clients[0].QueueList(ctx)
			require.NoError(t, err)
			return len(qs) == 1 && qs[0].Counts[pronto.StateCompleted] == jobs
		}, 30*time.Second, 20*time.Millisecond)
	})
}

func TestMiddlewareAndEvents(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var inserted, worked atomic.Int32
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, failWorker())
		cfg := fastConfig(workers, defaultQueue(4))
		cfg.InsertMiddleware = []pronto.InsertMiddleware{func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			inserted.Add(int32(len(ps)))
			for _, p := range ps {
				p.Tags = append(p.Tags, "via-mw")
			}
			return next(ctx, ps)
		}}
		cfg.WorkMiddleware = []pronto.WorkMiddleware{func(ctx context.Context, j *pronto.JobRow, next func(context.Context) error) error {
			worked.Add(1)
			return next(ctx)
		}}
		c := startClient(t, ts.Store, cfg)
		events, unsub := c.Subscribe()
		defer unsub()
		ok, err := c.Insert(ctx, failArgs{FailTimes: 1, Mode: "error"}, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"via-mw"}, ok.Tags)
		bad, err := c.Insert(ctx, failArgs{FailTimes: 5, Mode: "error"}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		snz, err := c.Insert(ctx, failArgs{FailTimes: 1, Mode: "snooze"}, nil)
		require.NoError(t, err)

		seen := map[string][]pronto.EventKind{}
		deadline := time.After(15 * time.Second)
		for len(seen[ok.ID]) < 2 || len(seen[bad.ID]) < 1 || len(seen[snz.ID]) < 2 {
			select {
			case e := <-events:
				seen[e.Job.ID] = append(seen[e.Job.ID], e.Kind)
			case <-deadline:
				t.Fatalf("missing events: %v", seen)
			}
		}
		require.Equal(t, []pronto.EventKind{pronto.EventFailed, pronto.EventCompleted}, seen[ok.ID])
		require.Equal(t, []pronto.EventKind{pronto.EventDiscarded}, seen[bad.ID])
		require.Equal(t, []pronto.EventKind{pronto.EventSnoozed, pronto.EventCompleted}, seen[snz.ID])
		require.EqualValues(t, 3, inserted.Load())
		require.EqualValues(t, 5, worked.Load())
	})
}

func TestRetrySurvivesClientRestartDuringBackoff(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		// The durable stores reopen their database for the second client; the memory store lives in the
		// process, so its "restart" keeps the same store.
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, failWorker())
		cfg := fastConfig(workers, defaultQueue(2))
		// A backoff long enough that the retryable state is seen before the first client retries.
		cfg.RetryPolicy = pronto.RetryPolicy{InitialInterval: 1500 * time.Millisecond, NoJitter: true}
		first, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		require.NoError(t, first.Start(ctx))
		j, err := first.Insert(ctx, failArgs{FailTimes: 1, Mode: "error"}, nil)
		require.NoError(t, err)
		r := waitState(t, first, j.ID, pronto.StateRetryable)
		// The backoff counts from the failure, which came after the attempt began: an order, not a
		// window a slow machine could miss.
		require.False(t, r.ScheduledAt.Before(r.StartedAt.Add(cfg.RetryPolicy.InitialInterval-time.Millisecond)),
			"the retry is due a backoff after the failed attempt (attempt began %v, retry due %v)", r.StartedAt, r.ScheduledAt)
		require.NoError(t, first.Stop(ctx))

		second := startClient(t, ts.reopen(t), cfg)
		done := waitState(t, second, j.ID, pronto.StateCompleted)
		require.Equal(t, 2, done.Attempt)
		require.False(t, done.StartedAt.Before(r.ScheduledAt.Add(-time.Millisecond)), "the retry did not run before its backoff elapsed")
	})
}

// heartbeatRecorder is a real store that records which jobs each heartbeat names, and when first.
type heartbeatRecorder struct {
	store.Store
	mu    sync.Mutex
	named map[string]int
	first map[string]time.Time
}

func newHeartbeatRecorder(s store.Store) *heartbeatRecorder {
	return &heartbeatRecorder{Store: s, named: map[string]int{}, first: map[string]time.Time{}}
}

func (r *heartbeatRecorder) Heartbeat(ctx context.Context, p store.HeartbeatParams) ([]string, error) {
	now := time.Now()
	r.mu.Lock()
	for _, id := range p.IDs {
		if r.named[id] == 0 {
			r.first[id] = now
		}
		r.named[id]++
	}
	r.mu.Unlock()
	return r.Store.Heartbeat(ctx, p)
}

func (r *heartbeatRecorder) times(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.named[id]
}

// firstNamed is when a heartbeat first named id (zero if never).
func (r *heartbeatRecorder) firstNamed(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first[id]
}

// TestHeartbeatExtendsOnlyLeasesNearTheirEnd checks that a heartbeat names a job only once the job's
// lease nears its end, and that a job outliving its lease keeps it through heartbeats. It asserts no
// wall-clock window a slow machine could miss: a quick job may legitimately be named on a machine so
// loaded that it is still held near the end of its lease; what must never happen is a job named
// before its lease could be near its end, i.e. sooner after its insert than lease minus the renewal
// margin (the claim, which starts the lease, comes after the insert began).
func TestHeartbeatExtendsOnlyLeasesNearTheirEnd(t *testing.T) {
	const lease, interval = 4 * time.Second, 100 * time.Millisecond
	// The client renews leases with at most half the lease left; a job named sooner than this after
	// its insert began was named while its lease was far from its end. A quarter of the lease is
	// allowed for a claim that began just before the insert and saw it (SQLite's claim can wait on
	// the insert's write lock).
	earliest := lease/2 - lease/4
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		rec := newHeartbeatRecorder(ts.Store)
		var runs sync.Map // job id -> *atomic.Int32
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blockArgs]) error {
			n, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			start := time.Now()
			for {
				// A quick job spans a few heartbeat ticks. The long job returns only once it has
				// outlived its first lease and been named in a heartbeat: it survives only if
				// heartbeats extended its lease (a deadline of three leases keeps a broken
				// heartbeat from hanging the test; the assertions below then fail).
				if j.Args.Key != "long" && time.Since(start) >= 3*interval {
					return nil
				}
				if j.Args.Key == "long" && (time.Since(start) > lease+interval && rec.times(j.ID) > 0 || time.Since(start) > 3*lease) {
					return nil
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}))
		cfg := fastConfig(workers, defaultQueue(11))
		cfg.LeaseDuration, cfg.HeartbeatInterval = lease, interval
		c := startClient(t, rec, cfg)
		long, err := c.Insert(ctx, blockArgs{Key: "long"}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		quick := map[string]time.Time{}
		for range 10 {
			before := time.Now()
			j, err := c.Insert(ctx, blockArgs{Key: "quick"}, nil)
			require.NoError(t, err)
			quick[j.ID] = before
		}
		for id, inserted := range quick {
			waitState(t, c, id, pronto.StateCompleted)
			if at := rec.firstNamed(id); !at.IsZero() {
				require.GreaterOrEqual(t, at.Sub(inserted), earliest,
					"a job was named in a heartbeat %v after its insert, while its %v lease was far from its end", at.Sub(inserted), lease)
			}
		}
		done := waitState(t, c, long.ID, pronto.StateCompleted)
		require.Equal(t, 1, done.Attempt, "the long job was rescued: its lease was not extended")
		n, _ := runs.Load(long.ID)
		require.EqualValues(t, 1, n.(*atomic.Int32).Load())
		require.Positive(t, rec.times(long.ID), "the long job was never named in a heartbeat")
	})
}
