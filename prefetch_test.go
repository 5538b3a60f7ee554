package pronto_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type prefetchArgs struct {
	N int `json:"n"`
}

func (prefetchArgs) Kind() string { return "test.prefetch" }

// gatedWorkers runs prefetchArgs jobs one gate at a time: a run records its job, then waits for
// the gate (or its context) before it returns.
type gatedWorkers struct {
	gate            chan struct{}
	mu              sync.Mutex
	ran             map[string]int
	inFlight, peak  atomic.Int32
	started         chan string
	onceClose       sync.Once
	cancelledBefore atomic.Int32
}

func newGatedWorkers() *gatedWorkers {
	return &gatedWorkers{gate: make(chan struct{}), ran: map[string]int{}, started: make(chan string, 100)}
}

func (g *gatedWorkers) open() { g.onceClose.Do(func() { close(g.gate) }) }

func (g *gatedWorkers) runs(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ran[id]
}

func (g *gatedWorkers) workers() *pronto.Workers {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[prefetchArgs]) error {
		if ctx.Err() != nil {
			g.cancelledBefore.Add(1) // a run handed a context already done: the client should not start it
		}
		n := g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		g.mu.Lock()
		g.ran[j.ID]++
		g.mu.Unlock()
		g.started <- j.ID
		select {
		case <-g.gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	return ws
}

// startGated starts a client over ts with one worker on the default queue and Prefetch prefetch,
// its runs held by g's gate; subscribe (if not nil) subscribes before the start. At the test's end
// the gate opens, then the client stops (within a bound), so a test that fails with the gate shut
// still ends.
func startGated(t *testing.T, ts *testStore, prefetch int, subscribe func(c *pronto.Client)) (*gatedWorkers, *pronto.Client) {
	t.Helper()
	return startGatedLease(t, ts, prefetch, subscribe, 0)
}

// startGatedLease is startGated with a lease of its own (0: fastConfig's 1 s).
func startGatedLease(t *testing.T, ts *testStore, prefetch int, subscribe func(c *pronto.Client), lease time.Duration) (*gatedWorkers, *pronto.Client) {
	t.Helper()
	g := newGatedWorkers()
	cfg := fastConfig(g.workers(), map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 1, Prefetch: prefetch}})
	if lease > 0 {
		cfg.LeaseDuration = lease
	}
	c, err := pronto.NewClient(ts, cfg)
	require.NoError(t, err)
	if subscribe != nil {
		subscribe(c)
	}
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { stopClient(c) })
	t.Cleanup(g.open)
	return g, c
}

// runningAndWaiting inserts two jobs into a client with one worker and Prefetch 1 and returns the
// one its worker runs and the one it holds prefetched.
func runningAndWaiting(t *testing.T, c *pronto.Client, g *gatedWorkers) (running, waiting string) {
	t.Helper()
	ids := insertPrefetchJobs(t, c, 2)
	waitActive(t, c, 2)
	running = <-g.started
	if waiting = ids[0]; waiting == running {
		waiting = ids[1]
	}
	return running, waiting
}

// stopClient stops c within a bound, for a cleanup.
func stopClient(c *pronto.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
}

func insertPrefetchJobs(t *testing.T, c *pronto.Client, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		row, err := c.Insert(context.Background(), prefetchArgs{N: i}, nil)
		require.NoError(t, err)
		ids[i] = row.ID
	}
	return ids
}

// waitActive waits until the default queue holds want active jobs.
func waitActive(t *testing.T, c *pronto.Client, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		qs, err := c.QueueList(context.Background())
		require.NoError(t, err)
		return len(qs) == 1 && qs[0].Counts[pronto.StateActive] == int64(want)
	}, 30*time.Second, 5*time.Millisecond, "the queue never held %d active jobs", want)
}

// TestPrefetchClaimsAheadOfFreeWorkers: with one worker and Prefetch 3, the client holds four jobs
// (one running, three claimed ahead), never runs two at once, and runs every job exactly once.
func TestPrefetchClaimsAheadOfFreeWorkers(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		var starts <-chan *pronto.Event
		g, c := startGated(t, ts, 3, func(c *pronto.Client) {
			var unsubscribe func()
			starts, unsubscribe = c.Subscribe(pronto.EventStarted)
			t.Cleanup(unsubscribe)
		})
		ids := insertPrefetchJobs(t, c, 10)
		waitActive(t, c, 4)
		first := <-g.started
		// A job an insert handed to the producer (PostgreSQL, Redis) is active in the store a moment
		// before the producer takes it.
		require.Eventually(t, func() bool {
			return c.Stats().Queues[pronto.DefaultQueue] == pronto.QueueStats{Running: 1, Prefetched: 3, Free: 0}
		}, 30*time.Second, time.Millisecond, "stats: %+v", c.Stats().Queues)
		heldSince := time.Now() // three jobs wait in the pool from before this
		// Keep them waiting a while, so that the bound checked below is not vacuous (a slow machine
		// only makes the wait longer).
		time.Sleep(20 * time.Millisecond)
		opened := time.Now()
		g.open()
		final := map[string]*pronto.JobRow{}
		for _, id := range ids {
			j := waitState(t, c, id, pronto.StateCompleted)
			// (A job an insert handed to the producer and that it could not take in time went back
			// with its attempt refunded: the counter may have moved without a run.)
			require.Empty(t, j.Errors, "job %s: no lease was lost", id)
			require.Equal(t, 1, g.runs(id), "job %s", id)
			final[id] = j
		}
		// A prefetched job's start, as its started event reports it (pickup latency reads it), is
		// its claim's time moved on by its wait for the worker. The three jobs that started after
		// the first are the three the pool held at heldSince (one worker takes them in order): each
		// waited at least from heldSince to opened.
		var order []*pronto.Event
		for range ids {
			order = append(order, <-starts)
		}
		require.Equal(t, first, order[0].Job.ID)
		for _, e := range order[1:4] {
			waited := e.Job.StartedAt.Sub(final[e.Job.ID].StartedAt)
			require.GreaterOrEqual(t, waited, opened.Sub(heldSince), "job %s: the wait is counted", e.Job.ID)
		}
		require.Equal(t, int32(1), g.peak.Load(), "one worker: never two runs at once")
		require.Zero(t, g.cancelledBefore.Load())
	})
}

// TestPrefetchedJobsGoBackOnStop: Stop gives the prefetched jobs back at once, their attempt
// refunded and their worker never run, while the running job finishes gracefully.
func TestPrefetchedJobsGoBackOnStop(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		// A lease no heartbeat delay of a loaded machine runs out: a prefetched job whose lease ran
		// out would go back by rescue, without the refund this test is about (a CI run saw it).
		g, c := startGatedLease(t, ts, 3, nil, time.Minute)
		ids := insertPrefetchJobs(t, c, 4)
		waitActive(t, c, 4)
		running := <-g.started
		budget := map[string]int{}
		for _, id := range ids {
			j, err := c.JobGet(context.Background(), id)
			require.NoError(t, err)
			budget[id] = j.MaxAttempts
		}

		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(context.Background()) }()
		// The running job still holds its worker (the gate is shut) while the other three go back.
		for _, id := range ids {
			if id == running {
				continue
			}
			j := waitState(t, c, id, pronto.StateAvailable)
			require.Empty(t, j.Errors, "job %s: given back, not rescued", id)
			require.Equal(t, budget[id]+1, j.MaxAttempts, "job %s: the prefetched attempt is refunded", id)
			require.Zero(t, g.runs(id), "job %s: a prefetched job given back never runs", id)
		}
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) before the running job finished", err)
		default:
		}
		g.open()
		require.NoError(t, <-stopped)
		j := waitState(t, c, running, pronto.StateCompleted)
		require.Empty(t, j.Errors)
		require.Equal(t, 1, g.runs(running))
		require.Zero(t, g.cancelledBefore.Load())
	})
}

// TestPrefetchedLeasesAreRenewed: a prefetched job waits for its worker longer than its lease; the
// client's heartbeats keep it (no rescue, no second attempt).
func TestPrefetchedLeasesAreRenewed(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		g, c := startGated(t, ts, 1, nil)
		running, waiting := runningAndWaiting(t, c, g)
		ids := []string{running, waiting}
		first, err := c.JobGet(context.Background(), waiting)
		require.NoError(t, err)
		require.Equal(t, pronto.StateActive, first.State)
		// Wait until the waiting job's lease has been extended past its first end by a heartbeat
		// and that first end has passed: without the heartbeat the rescuer would have taken it.
		require.Eventually(t, func() bool {
			j, err := c.JobGet(context.Background(), waiting)
			require.NoError(t, err)
			require.Equal(t, pronto.StateActive, j.State, "the prefetched job stays claimed")
			return j.LeaseExpiresAt.After(first.LeaseExpiresAt) && time.Now().After(first.LeaseExpiresAt.Add(200*time.Millisecond))
		}, 30*time.Second, 20*time.Millisecond)
		require.Zero(t, g.runs(waiting), "not started while the one worker is busy")
		g.open()
		for _, id := range ids {
			j := waitState(t, c, id, pronto.StateCompleted)
			require.Empty(t, j.Errors, "job %s was never rescued", id)
			require.Equal(t, 1, g.runs(id))
		}
	})
}

// TestCancelledPrefetchedJobNeverRuns: a prefetched job cancelled while it waits for a worker is
// cancelled without running (JobCancel on the client that holds it stops the run at once).
func TestCancelledPrefetchedJobNeverRuns(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		g, c := startGated(t, ts, 1, nil)
		events, unsubscribe := c.Subscribe(pronto.EventCancelled)
		defer unsubscribe()
		running, waiting := runningAndWaiting(t, c, g)
		// The client holds it (an insert may have handed it to the producer a moment before the
		// producer takes it: the store shows it active first).
		require.Eventually(t, func() bool { return c.Stats().Queues[pronto.DefaultQueue].Prefetched == 1 },
			30*time.Second, time.Millisecond)
		_, err := c.JobCancel(context.Background(), waiting)
		require.NoError(t, err)
		waitState(t, c, waiting, pronto.StateCancelled)
		g.open()
		waitState(t, c, running, pronto.StateCompleted)
		select {
		case e := <-events:
			require.Equal(t, waiting, e.Job.ID)
		case <-time.After(30 * time.Second):
			t.Fatal("no cancelled event for the prefetched job")
		}
		require.Zero(t, g.runs(waiting), "the cancelled job never ran")
		require.Zero(t, g.cancelledBefore.Load())
	})
}

func TestPrefetchConfig(t *testing.T) {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(context.Context, *pronto.Job[prefetchArgs]) error { return nil }))
	_, err := pronto.NewClient(memory.New(), &pronto.Config{Workers: ws, Queues: map[string]pronto.QueueConfig{"q": {Prefetch: -2}}})
	require.ErrorContains(t, err, `queue "q": Prefetch -2 is negative (NoPrefetch, -1, turns it off)`)
	c, err := pronto.NewClient(memory.New(), &pronto.Config{Workers: ws, Queues: map[string]pronto.QueueConfig{"q": {Prefetch: pronto.NoPrefetch}}})
	require.NoError(t, err)
	require.Equal(t, 100, c.Stats().Queues["q"].Free, "NoPrefetch: the workers' slots only")
}

// TestChaosPrefetchingWorkers: worker processes with one worker and Prefetch 6 on PostgreSQL. One is
// SIGKILLed while it holds prefetched jobs: they never ran there, and run once in another process
// when their leases run out (attempt 2, a lease_expired error). Another, stopped with SIGTERM while its worker
// is busy, gives its prefetched jobs back at once, their attempts refunded and their workers never
// run, and finishes its running job.
func TestChaosPrefetchingWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts, pool, plain := chaosPostgres(t)
	env := append(plain[:len(plain):len(plain)], chaosWorkersEnv+"=1", chaosPrefetchEnv+"=6")
	admin, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	heldBy := func(worker string) []string {
		rows, err := pool.Query(ctx, "SELECT id::text FROM "+ts.schema+".jobs WHERE state = 'active' AND worker_id = $1", worker)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	waitHeld := func(p *chaosProc, n int) []string {
		var ids []string
		require.Eventually(t, func() bool { ids = heldBy(p.id); return len(ids) == n }, 60*time.Second, 10*time.Millisecond,
			"process %s never held %d jobs", p.id, n)
		return ids
	}

	// SIGKILL.
	w1 := startChaosWorker(t, kindPostgres, env...)
	var acked []string
	for range 12 {
		j, err := admin.Insert(ctx, chaosArgs{SleepMS: 5000}, nil)
		require.NoError(t, err)
		acked = append(acked, j.ID)
	}
	held := waitHeld(w1, 7)
	w1.waitLine(t, "start ", 30*time.Second)
	w1.kill(t)
	started := w1.runs()
	require.Len(t, started, 1, "one worker: one job started, six prefetched")
	// The survivor is a plain process (eight workers, no prefetch).
	w2 := startChaosWorker(t, kindPostgres, plain...)
	waitAllCompleted(t, countPostgres(pool, ts.schema), len(acked))
	w2.stop(t)
	ledger := readPostgresLedger(t, pool, ts.schema)
	for _, id := range held {
		j, err := admin.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCompleted, j.State)
		require.Len(t, j.Errors, 1, "job %s was held by the killed process and rescued", id)
		require.Equal(t, "lease_expired", j.Errors[0].Type)
		require.Len(t, ledger[id], 1, "job %s ran once", id)
		require.Equal(t, w2.pid, ledger[id][0].PID, "job %s ran in the survivor", id)
	}
	for id := range started {
		require.Contains(t, held, id, "the killed process started only a job it held")
	}
	for _, id := range acked {
		require.Len(t, ledger[id], 1, "job %s ran exactly once", id)
	}

	// SIGTERM.
	w3 := startChaosWorker(t, kindPostgres, env...)
	var second []string
	for range 7 {
		j, err := admin.Insert(ctx, chaosArgs{SleepMS: 1500}, nil)
		require.NoError(t, err)
		second = append(second, j.ID)
	}
	waitHeld(w3, 7)
	w3.waitLine(t, "start ", 30*time.Second)
	running := w3.runs()
	require.Len(t, running, 1)
	w3.stop(t)
	for _, id := range second {
		j, err := admin.JobGet(ctx, id)
		require.NoError(t, err)
		if _, ran := running[id]; ran {
			require.Equal(t, pronto.StateCompleted, j.State, "the running job finishes before the process exits")
			continue
		}
		require.Equal(t, pronto.StateAvailable, j.State, "job %s: given back by the stopping process", id)
		require.Empty(t, j.Errors, "job %s: a prefetched job given back has no error", id)
		require.NotContains(t, w3.runs(), id, "job %s never started", id)
	}
}
