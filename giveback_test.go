package pronto_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// givebackArgs is the job of the give-back tests: Mode "fail" fails at once, "quick" succeeds at
// once, anything else waits for the workers' gate (or the job's end).
type givebackArgs struct {
	Mode string `json:"mode,omitempty"`
	N    int    `json:"n,omitempty"`
}

func (givebackArgs) Kind() string { return "giveback.args" }

// givebackWorkers records the runs of givebackArgs jobs: started receives each run's job id.
type givebackWorkers struct {
	gate     chan struct{}
	gateOnce sync.Once
	started  chan string
	mu       sync.Mutex
	ran      map[string]int
}

func newGivebackWorkers() *givebackWorkers {
	return &givebackWorkers{gate: make(chan struct{}), started: make(chan string, 100), ran: map[string]int{}}
}

// open lets every waiting run, and every later one, finish.
func (w *givebackWorkers) open() { w.gateOnce.Do(func() { close(w.gate) }) }

// runs is how many times job id's worker ran.
func (w *givebackWorkers) runs(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ran[id]
}

func (w *givebackWorkers) workers() *pronto.Workers {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[givebackArgs]) error {
		w.mu.Lock()
		w.ran[job.ID]++
		w.mu.Unlock()
		select {
		case w.started <- job.ID:
		default:
		}
		switch job.Args.Mode {
		case "fail":
			return errors.New("giveback: failed on purpose")
		case "quick":
			return nil
		}
		select {
		case <-w.gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	return ws
}

func givebackInsert(t *testing.T, c *pronto.Client, args givebackArgs, opts *pronto.InsertOpts) *pronto.JobRow {
	t.Helper()
	row, err := c.Insert(context.Background(), args, opts)
	require.NoError(t, err)
	return row
}

func givebackGet(t *testing.T, c *pronto.Client, id string) *pronto.JobRow {
	t.Helper()
	j, err := c.JobGet(context.Background(), id)
	require.NoError(t, err)
	return j
}

// givebackStart starts a client working the default queue as q says, with w's workers; tweak, when
// set, changes the config first. The client is stopped at the test's end.
func givebackStart(t *testing.T, ts *testStore, w *givebackWorkers, q pronto.QueueConfig, tweak func(*pronto.Config)) *pronto.Client {
	t.Helper()
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{pronto.DefaultQueue: q}, Workers: w.workers()}
	if tweak != nil {
		tweak(cfg)
	}
	c, err := pronto.NewClient(ts, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		w.open()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// givebackRecv returns what ch receives, failing the test if nothing comes.
func givebackRecv(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s", what)
		return ""
	}
}

// TestStopGivesBackUnstartedNoPrefetch: a NoPrefetch queue whose one worker has released its slot but
// is still busy with its attempt's outcome (OnError here; a full completer queue does the same) claims
// the next job, with no worker free to run it yet. Stop gives that job back to available without
// running it, as it does a prefetched one. It used to give back only the runs of queues that
// prefetch: the job stayed active and ran after Stop was called.
func TestStopGivesBackUnstartedNoPrefetch(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		w := newGivebackWorkers()
		inOnError := make(chan struct{})
		unblock := make(chan struct{})
		var once sync.Once
		c := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 1, Prefetch: pronto.NoPrefetch}, func(cfg *pronto.Config) {
			cfg.OnError = func(ctx context.Context, job *pronto.JobRow, err error) {
				once.Do(func() { close(inOnError) })
				<-unblock
			}
		})
		var unblockOnce sync.Once
		release := func() { unblockOnce.Do(func() { close(unblock) }) }
		t.Cleanup(release)
		a := givebackInsert(t, c, givebackArgs{Mode: "fail"}, &pronto.InsertOpts{MaxAttempts: 5})
		require.Equal(t, a.ID, givebackRecv(t, w.started, "run of A"))
		select {
		case <-inOnError:
		case <-time.After(30 * time.Second):
			t.Fatal("OnError never called")
		}
		b := givebackInsert(t, c, givebackArgs{Mode: "quick"}, nil)
		// The one worker is still busy with A's attempt (its OnError), yet B is claimed.
		claimed := waitState(t, c, b.ID, pronto.StateActive)
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(context.Background()) }()
		require.Eventually(t, func() bool { return !c.Stats().Started }, 30*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return givebackGet(t, c, b.ID).State == pronto.StateAvailable }, 30*time.Second, 10*time.Millisecond,
			"job B (claimed, never started) was not given back to available by Stop")
		release()
		require.NoError(t, <-stopped)
		final := givebackGet(t, c, b.ID)
		require.Zero(t, w.runs(b.ID), "job B was claimed (attempt %d) but not started when Stop was called, yet its worker ran after Stop (now %s)", claimed.Attempt, final.State)
		require.Equal(t, pronto.StateAvailable, final.State)
		require.Empty(t, final.Errors, "a given-back job did not fail")
		require.Equal(t, b.MaxAttempts+1, final.MaxAttempts, "the given-back job's attempt is refunded")
	})
}

// TestPauseGivesBackPrefetched: QueuePause stops every client from claiming the queue's jobs and lets
// running ones finish; the jobs a client had already prefetched (claimed, not started) do not start:
// they are given back to available, their attempt refunded, and run after QueueResume. They used to
// start one by one after the pause (up to AutoPrefetchMax per client by default).
func TestPauseGivesBackPrefetched(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		w := newGivebackWorkers()
		c := givebackStart(t, ts, w, pronto.QueueConfig{MaxWorkers: 1, Prefetch: 2}, nil)
		var ids []string
		maxAttempts := map[string]int{}
		for i := range 3 {
			row := givebackInsert(t, c, givebackArgs{N: i}, nil)
			ids = append(ids, row.ID)
			maxAttempts[row.ID] = row.MaxAttempts
		}
		waitActive(t, c, 3)
		running := givebackRecv(t, w.started, "first run")
		require.Eventually(t, func() bool { return c.Stats().Queues[pronto.DefaultQueue].Prefetched == 2 }, 30*time.Second, time.Millisecond)
		require.NoError(t, c.QueuePause(context.Background(), pronto.DefaultQueue))
		w.open() // the running job finishes
		waitState(t, c, running, pronto.StateCompleted)
		for _, id := range ids {
			if id == running {
				continue
			}
			require.Eventually(t, func() bool { return givebackGet(t, c, id).State != pronto.StateActive }, 30*time.Second, 5*time.Millisecond)
			j := givebackGet(t, c, id)
			require.Zero(t, w.runs(id), "job %s, prefetched before QueuePause returned, was started while the queue was paused (state now %s)", id, j.State)
			require.Equal(t, pronto.StateAvailable, j.State)
			require.Empty(t, j.Errors, "a given-back job did not fail")
			require.Equal(t, maxAttempts[id]+1, j.MaxAttempts, "the given-back job's attempt is refunded")
		}
		require.NoError(t, c.QueueResume(context.Background(), pronto.DefaultQueue))
		for _, id := range ids {
			waitState(t, c, id, pronto.StateCompleted)
		}
	})
}
