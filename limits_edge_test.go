package pronto_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type limArgs struct {
	Mode string `json:"mode"`
	N    int    `json:"n"`
}

func (limArgs) Kind() string { return "audit.lim" }

// TestWorkflowQueueBound: a workflow inserted into a queue at its maximum depth is refused
// with ErrQueueFull like any other insert (backpressure.go: "An insert that would take a bounded
// queue beyond it fails"). Workflows used to skip the bound, and tenant enqueue limits.
func TestWorkflowQueueBound(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "wfbound", 1))
		_, err = c.Insert(ctx, limArgs{N: 1}, &pronto.InsertOpts{Queue: "wfbound"})
		require.NoError(t, err)
		_, err = c.Insert(ctx, limArgs{N: 2}, &pronto.InsertOpts{Queue: "wfbound"})
		require.ErrorIs(t, err, pronto.ErrQueueFull, "the queue is full for a plain insert")

		w := pronto.NewWorkflow("over-bound").
			Add("a", limArgs{N: 3}, &pronto.InsertOpts{Queue: "wfbound"}).
			Add("b", limArgs{N: 4}, &pronto.InsertOpts{Queue: "wfbound"})
		_, err = c.WorkflowInsert(ctx, w)
		require.ErrorIs(t, err, pronto.ErrQueueFull, "a workflow went past the queue's bound")
	})
}

// TestWorkflowTenantEnqueueLimit: a tenant's max_queue_depth holds for a workflow's jobs too.
func TestWorkflowTenantEnqueueLimit(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 1}))
		_, err = c.Insert(ctx, limArgs{N: 1}, &pronto.InsertOpts{Tenant: "acme"})
		require.NoError(t, err)
		_, err = c.Insert(ctx, limArgs{N: 2}, &pronto.InsertOpts{Tenant: "acme"})
		require.ErrorIs(t, err, pronto.ErrTenantLimit, "the tenant is at its limit for a plain insert")

		w := pronto.NewWorkflow("over-limit").
			Add("a", limArgs{N: 3}, &pronto.InsertOpts{Tenant: "acme"}).
			Add("b", limArgs{N: 4}, &pronto.InsertOpts{Tenant: "acme"})
		_, err = c.WorkflowInsert(ctx, w)
		require.ErrorIs(t, err, pronto.ErrTenantLimit, "a workflow went past the tenant's max_queue_depth")
	})
}

// TestRateLimitHugeBounds: a limit the Go API accepts is stored on every store, or refused as invalid
// on every store; never a store error on one store only (PostgreSQL failed to encode a MaxActive
// over 2^31-1, which the others stored).
func TestRateLimitHugeBounds(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		for name, l := range map[string]pronto.RateLimit{
			"maxactive": {MaxActive: math.MaxInt32 + 1},
			"rate":      {Rate: math.MaxInt32 + 1, Period: time.Second},
			"period":    {Rate: 1, Period: time.Duration(math.MaxInt64)},
		} {
			err := c.RateLimitSet(ctx, "huge-"+name, l)
			if err != nil {
				require.ErrorIs(t, err, pronto.ErrInvalidArgs, "%s: %+v gave a store error, not a clear refusal", name, l)
				continue
			}
			info, err := c.RateLimitGet(ctx, "huge-"+name)
			require.NoError(t, err)
			require.Equal(t, l.MaxActive, info.Limit.MaxActive, name)
			require.Equal(t, l.Rate, info.Limit.Rate, name)
		}
	})
}

// limWorkers registers a worker for limArgs: mode "block" waits for its context (or release),
// "fail" fails, anything else succeeds. started gets each job's N as it starts.
func limWorkers(started chan<- int, release <-chan struct{}) *pronto.Workers {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[limArgs]) error {
		started <- j.Args.N
		switch j.Args.Mode {
		case "block", "blockfail":
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				if j.Args.Mode == "blockfail" {
					return errors.New("audit: fails")
				}
				return nil
			}
		case "fail":
			return errors.New("audit: fails")
		}
		return nil
	}))
	return ws
}

func slowPollConfig(ws *pronto.Workers) *pronto.Config {
	cfg := heldConfig(ws, map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 4}})
	cfg.PollInterval = time.Minute
	return cfg
}

func waitStarted(t *testing.T, started <-chan int, want int, what string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case n := <-started:
			if n == want {
				return
			}
		case <-deadline:
			t.Fatalf("job %d never started: %s", want, what)
		}
	}
}

// TestCancelActiveWakesWaiting: with MaxActive 1, cancelling the key's running job frees its
// slot and the waiting job of the key starts at once, as after a completion (rate-limits.md:
// "When a limited job finishes, its queue's producers are woken at once (a concurrency slot is
// free)"). The poll interval is a minute, so only the wake-up can start it; memory and Redis used to
// leave it to the poll.
func TestCancelActiveWakesWaiting(t *testing.T) {
	for _, how := range []string{"job", "workflow"} {
		t.Run(how, func(t *testing.T) { testCancelActiveWakesWaiting(t, how) })
	}
}

// testCancelActiveWakesWaiting runs TestCancelActiveWakesWaiting with the running job cancelled by
// JobCancel, or as a step of a workflow by WorkflowCancel.
func testCancelActiveWakesWaiting(t *testing.T, how string) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		started := make(chan int, 16)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		c, err := pronto.NewClient(ts.Store, slowPollConfig(limWorkers(started, release)))
		require.NoError(t, err)
		require.NoError(t, c.RateLimitSet(ctx, "slot", pronto.RateLimit{MaxActive: 1}))
		// Both inserted before the client starts: the first claim takes the first only.
		first := &pronto.InsertOpts{RateKey: "slot", Priority: 10}
		var j1ID, wfID string
		if how == "workflow" {
			wf := pronto.NewChain("limited", pronto.WorkflowJob{Args: limArgs{Mode: "block", N: 1}, Opts: first})
			res, err := c.WorkflowInsert(ctx, wf)
			require.NoError(t, err)
			j1ID, wfID = res.Jobs[res.Order[0]].ID, wf.ID()
		} else {
			j1, err := c.Insert(ctx, limArgs{Mode: "block", N: 1}, first)
			require.NoError(t, err)
			j1ID = j1.ID
		}
		_, err = c.Insert(ctx, limArgs{Mode: "ok", N: 2}, &pronto.InsertOpts{RateKey: "slot"})
		require.NoError(t, err)
		startBuilt(t, c)
		waitStarted(t, started, 1, "first job")
		require.Eventually(t, func() bool {
			info, err := c.RateLimitGet(ctx, "slot")
			return err == nil && info.Waiting == 1 && info.Active == 1
		}, 10*time.Second, 20*time.Millisecond)
		if how == "workflow" {
			_, err = c.WorkflowCancel(ctx, wfID)
		} else {
			_, err = c.JobCancel(ctx, j1ID)
		}
		require.NoError(t, err)
		deadline := time.After(20 * time.Second)
		for ok := false; !ok; {
			select {
			case n := <-started:
				ok = n == 2
			case <-deadline:
				info, _ := c.RateLimitGet(ctx, "slot")
				j, _ := c.JobGet(ctx, j1ID)
				t.Fatalf("the waiting job never started after the running one was cancelled: limit %+v, first job %s", info, j.State)
			}
		}
	})
}

// TestConcurrencyLimitNotHandedOff: with MaxActive 1 and one job of the key running, a second job of
// the key inserted while the queue's producer idles waits (rate-limits.md: "at most this many of the
// key's jobs run at once"). PostgreSQL's insert hand-off used to write it already claimed.
func TestConcurrencyLimitNotHandedOff(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var mu sync.Mutex
		running, most := 0, 0
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[limArgs]) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil
		}))
		c := startClient(t, ts.Store, heldConfig(ws, defaultQueue(4)))
		require.NoError(t, c.RateLimitSet(ctx, "one-at-a-time", pronto.RateLimit{MaxActive: 1}))
		_, err := c.Insert(ctx, limArgs{N: 1}, &pronto.InsertOpts{RateKey: "one-at-a-time"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return running == 1 }, 15*time.Second, 10*time.Millisecond)
		// The producer is idle with free slots now.
		_, err = c.Insert(ctx, limArgs{N: 2}, &pronto.InsertOpts{RateKey: "one-at-a-time"})
		require.NoError(t, err)
		var info *pronto.RateLimitInfo
		require.Eventually(t, func() bool {
			mu.Lock()
			over := most > 1
			mu.Unlock()
			info, err = c.RateLimitGet(ctx, "one-at-a-time")
			require.NoError(t, err)
			return over || info.Active > 1 || info.Waiting == 1
		}, 15*time.Second, 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, most, "two jobs of a key with MaxActive 1 ran at once (limit %+v)", info)
		require.LessOrEqual(t, info.Active, int64(1), "active count over MaxActive")
	})
}
