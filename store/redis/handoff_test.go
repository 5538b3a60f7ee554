package redis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// loopContext returns a context whose claims the store takes for a producer's loop.
func loopContext(t *testing.T) context.Context {
	t.Helper()
	return producer.LoopContext(context.Background())
}

func loopClaim(queue string) store.ClaimParams {
	return store.ClaimParams{Queue: queue, Limit: 4, WorkerID: "w1", LeaseDuration: time.Minute}
}

// handoffPair returns two stores under one fresh key prefix, a (whose producers wait) and b (the
// inserting process), and a's notifications.
func handoffPair(t *testing.T) (a, b *Store, notes chan store.Notification) {
	t.Helper()
	prefix := "prontotest:" + uuidv7.New() + ":"
	a, b = storeWithPrefix(t, prefix), storeWithPrefix(t, prefix)
	notes = make(chan store.Notification, 100)
	t.Cleanup(a.Notifier().Subscribe(func(n store.Notification) { notes <- n }))
	return a, b, notes
}

// handedTo waits for the job handed to the waiter of p and returns it (a claim in p's loop).
func handedTo(t *testing.T, ctx context.Context, s *Store, p store.ClaimParams, notes <-chan store.Notification) *store.Job {
	t.Helper()
	waitFor(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == p.Queue })
	jobs, err := s.Claim(ctx, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

// TestHandoff: after a producer's claim leaves slots free, an insert from another process claims
// the job for it in the insert's script, as a claim would (active, attempt 1, the producer's worker,
// a fresh token), and the producer's next claim gets it; its outcome is fenced by that token.
func TestHandoff(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)

	p := loopClaim("ho")
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)

	in := testJob("ho")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	j := handedTo(t, loop, a, p, notes)
	require.Equal(t, in.ID, j.ID)
	require.Equal(t, store.StateActive, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "w1", j.WorkerID)
	require.NotEmpty(t, j.ClaimToken)
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State)
	require.Equal(t, j.ClaimToken, got.ClaimToken)

	res, err := a.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: 1, Token: "not-the-token", State: store.StateCompleted}})
	require.NoError(t, err)
	require.False(t, res[0].Applied, "another token is refused")
	res, err = a.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: 1, Token: j.ClaimToken, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)

	// The producer is advertised again after it took the job: the next insert is handed too.
	in2 := testJob("ho")
	_, err = b.Insert(ctx, []*store.InsertParams{in2})
	require.NoError(t, err)
	require.Equal(t, in2.ID, handedTo(t, loop, a, p, notes).ID)
}

// TestHandoffOnlyToLoops: a claim outside a producer's loop (a remote fetch) is never advertised,
// so an insert after it leaves the job available.
func TestHandoffOnlyToLoops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	jobs, err := s.Claim(ctx, loopClaim("fetch"))
	require.NoError(t, err)
	require.Empty(t, jobs)
	in := testJob("fetch")
	_, err = s.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	got, err := s.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
}

// TestHandoffFollowsClaimRules: the insert's claim for a waiting producer is the claim: a job of a
// kind the producer does not work, or of a paused queue, is not handed and is announced as usual.
func TestHandoffFollowsClaimRules(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)

	p := loopClaim("rules")
	p.Kinds = []string{"other"}
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	in := testJob("rules") // kind "k"
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitFor(t, notes, func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == "rules" && n.Nonce != 0
	})
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)

	p = loopClaim("paused")
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.NoError(t, b.PauseQueue(ctx, "paused"))
	in = testJob("paused")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitFor(t, notes, func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == "paused" && n.Nonce != 0
	})
	got, err = b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
}

// TestHandoffNotTakenReturns: a handed job the producer does not claim in time (it is busy or
// stopped) goes back to available with its attempt refunded, and is announced.
func TestHandoffNotTakenReturns(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("late"))
	require.NoError(t, err)
	in := testJob("late")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := b.GetJob(ctx, in.ID)
		return err == nil && got.State == store.StateAvailable && got.MaxAttempts == 4
	}, 10*time.Second, 10*time.Millisecond)
	// Withdrawn: the next insert stays available too.
	in2 := testJob("late")
	_, err = b.Insert(ctx, []*store.InsertParams{in2})
	require.NoError(t, err)
	got, err := b.GetJob(ctx, in2.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
	jobs, err := b.Claim(ctx, store.ClaimParams{Queue: "late", Limit: 10, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
}

// TestHandoffCloseReturnsJobs: closing a store withdraws its producers' advertisements and returns
// the jobs handed to them and not taken to available.
func TestHandoffCloseReturnsJobs(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	_, err := a.Claim(loop, loopClaim("close"))
	require.NoError(t, err)
	in := testJob("close")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitFor(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == "close" })
	require.NoError(t, a.Close())
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
	require.Equal(t, 4, got.MaxAttempts, "the attempt is refunded")
	m, err := b.rdb.ZRange(ctx, b.qkey("close")+"wait", 0, -1).Result()
	require.NoError(t, err)
	require.Empty(t, m, "no advertisement is left")
}

// TestHandoffToDeadProcessIsRescued: a job handed to a process that died (its advertisement still
// standing, nothing reading its inbox) is active under a lease like any claimed job, and the
// rescuer takes it back when the lease ends.
func TestHandoffToDeadProcessIsRescued(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	p := loopClaim("dead")
	p.LeaseDuration = 100 * time.Millisecond
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	// The process dies: its waiters stop without withdrawing anything.
	a.waitCancel()
	for _, w := range a.waiters {
		require.NoError(t, a.rdb.RPush(ctx, w.inbox(), stopMarker).Err())
		<-w.done
		require.NoError(t, a.rdb.Del(ctx, w.inbox()).Err())
	}
	in := testJob("dead")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "handed to the dead process")
	require.Eventually(t, func() bool {
		r, err := b.Rescue(ctx, store.RescueParams{Limit: 10})
		return err == nil && len(r.Requeued) == 1 && r.Requeued[0].ID == in.ID
	}, 10*time.Second, 50*time.Millisecond)
	jobs, err := b.Claim(ctx, store.ClaimParams{Queue: "dead", Limit: 10, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt)
}

// TestHandoffClients runs two pronto clients on Redis (workers in two stores, the poll an hour, so
// every pickup is by hand-off or notification) while a third store inserts single jobs paced and in
// bursts and batches: every job completes, each run once (until the clients stop). Run it with -race.
func TestHandoffClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix := "prontotest:" + uuidv7.New() + ":"
	var mu sync.Mutex
	runs := map[string]int{}
	var done atomic.Int32
	var clients []*pronto.Client
	for range 2 {
		s := storeWithPrefix(t, prefix)
		cfg := relayWorkerConfig(nil, func(id string) {
			mu.Lock()
			runs[id]++
			mu.Unlock()
			done.Add(1)
		})
		c, err := pronto.NewClient(s, cfg)
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		clients = append(clients, c)
	}
	ins, err := pronto.NewClient(storeWithPrefix(t, prefix), nil)
	require.NoError(t, err)
	total := 0
	for i := range 60 {
		_, err := ins.Insert(ctx, relayArgs{N: i}, nil)
		require.NoError(t, err)
		total++
		if i%3 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	batch := make([]pronto.InsertManyParams, 20)
	for i := range batch {
		batch[i] = pronto.InsertManyParams{Args: relayArgs{N: i}}
	}
	_, err = ins.InsertMany(ctx, batch)
	require.NoError(t, err)
	total += len(batch)
	require.Eventually(t, func() bool { return done.Load() >= int32(total) }, 30*time.Second, 10*time.Millisecond)
	for _, c := range clients {
		require.NoError(t, c.Stop(ctx))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, total)
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
}

// TestHandoffWaiterReconnects: when the connection a waiter blocks on is killed, the waiter takes a
// new one, and jobs are handed to it again.
func TestHandoffWaiterReconnects(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 8})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(ctx, rdb, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	notes := make(chan store.Notification, 100)
	defer s.Notifier().Subscribe(func(n store.Notification) { notes <- n })()
	p := loopClaim("re")
	_, err = s.Claim(loop, p)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := rdb.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, "cmd=blmove")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err())
	// The next claim advertises the producer again; inserts are handed to it once its waiter waits
	// on a new connection (a job pushed meanwhile waits in its inbox).
	_, err = s.Claim(loop, p)
	require.NoError(t, err)
	in := testJob("re")
	_, err = s.Insert(ctx, []*store.InsertParams{in}) // the same store: its own subscribers hear nothing of it
	require.NoError(t, err)
	require.Equal(t, in.ID, handedTo(t, loop, s, p, notes).ID)
}

// TestHandoffLeftoverReturns: jobs the waiter claimed again for the producer's free slots and that
// the producer then does not all take go back to available, like a hand-off not taken.
func TestHandoffLeftoverReturns(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	handed := func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == "left" && n.Nonce == 0
	}

	p := loopClaim("left")
	p.Limit = 3
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	first := testJob("left")
	_, err = b.Insert(ctx, []*store.InsertParams{first})
	require.NoError(t, err)
	waitFor(t, notes, handed)
	more := []*store.InsertParams{testJob("left"), testJob("left")}
	_, err = b.Insert(ctx, more) // a batch: not handed, available
	require.NoError(t, err)
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, first.ID, jobs[0].ID)
	waitFor(t, notes, handed) // the waiter claimed the two others for the two slots left
	p.Limit = 1
	jobs, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	left := more[0].ID
	if jobs[0].ID == left {
		left = more[1].ID
	}
	require.Eventually(t, func() bool {
		got, err := b.GetJob(ctx, left)
		return err == nil && got.State == store.StateAvailable
	}, 10*time.Second, 10*time.Millisecond)
}

// TestWaiterSettled: a waiter follows up every take that left its producer slots free, also the one
// that emptied its kept jobs after the waiter last looked. That take's claim came back short, so its
// producer takes the queue for empty; when the waiter went back to its inbox without claiming for
// those slots, jobs inserted meanwhile (a batch, whose notification the short claim had answered)
// waited for the next notification or poll (TestHandoffClients, with the poll an hour, lost them
// about one run in twelve under load).
func TestWaiterSettled(t *testing.T) {
	w := &waiter{s: &Store{serveWithin: serveWithin}, taken: make(chan int, 1)}
	keep := func(n int) {
		for range n {
			w.buf.Add(&store.Job{ID: uuidv7.New()}, time.Now())
		}
	}
	keep(1)
	free, done := w.settled()
	require.Zero(t, free)
	require.False(t, done, "a kept job not yet taken")

	require.Len(t, w.take(3), 1)
	free, done = w.settled()
	require.Equal(t, 2, free, "the take that emptied the waiter left two slots free: they are claimed for")
	require.False(t, done)
	free, done = w.settled()
	require.Zero(t, free)
	require.True(t, done, "followed up, nothing kept")

	// A take that fills its producer's slots leaves nothing to claim for.
	keep(3)
	require.Len(t, w.take(2), 2)
	free, done = w.settled()
	require.Zero(t, free)
	require.False(t, done, "one job still kept")
	require.Len(t, w.take(1), 1)
	free, done = w.settled()
	require.Zero(t, free)
	require.True(t, done)
}

// TestHandoffCancelledNeverStarts: a job cancelled while handed and not yet taken leaves the
// waiter's buffer, so the producer's next claim does not start it; a handed job whose cancellation
// was heard before it arrived (the inbox and the notifications travel apart) is dropped on arrival.
func TestHandoffCancelledNeverStarts(t *testing.T) {
	t.Parallel()
	loop := loopContext(t)
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	a.serveWithin = time.Minute // the handed job waits for the test, however slow the machine

	p := loopClaim("hocancel")
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)
	in := testJob("hocancel")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitFor(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == "hocancel" })
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "handed")

	_, err = b.CancelJob(ctx, in.ID)
	require.NoError(t, err)
	// The store's own subscriber runs before the test's: once the test hears it, the job is gone.
	waitFor(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyCancel && n.JobID == in.ID })
	jobs, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs, "a cancelled job is not started")
	got, err = b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, got.State)

	w := a.waiterFor(&p, nil)
	require.NotNil(t, w)
	a.heardCancel(store.Notification{Kind: store.NotifyCancel, Queue: "hocancel", JobID: "early", ClaimToken: "t1"})
	require.Zero(t, w.keep([]*store.Job{{ID: "early", Queue: "hocancel", ClaimToken: "t1"}}), "dropped on arrival")
	require.Equal(t, 1, w.keep([]*store.Job{{ID: "early", Queue: "hocancel", ClaimToken: "t2"}}), "another run of the job")
	require.Equal(t, []string{"early"}, jobIDs(w.take(4)))
}

func jobIDs(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
