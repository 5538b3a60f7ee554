package pronto_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// claimCounter counts the claim statements a client makes through its store.
type claimCounter struct {
	store.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, p)
}

// ranOn records which client ran each job.
type ranOn struct {
	mu   sync.Mutex
	by   map[string][]int // job message -> the clients that ran it
	runs chan string
}

func newRanOn() *ranOn { return &ranOn{by: map[string][]int{}, runs: make(chan string, 1000)} }

func (r *ranOn) record(client int, msg string) {
	r.mu.Lock()
	r.by[msg] = append(r.by[msg], client)
	r.mu.Unlock()
	r.runs <- msg
}

// wait waits for job msg to run and returns the clients that ran it.
func (r *ranOn) wait(t *testing.T, msg string) []int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-r.runs:
			if m != msg {
				continue
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return append([]int(nil), r.by[msg]...)
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("job %q never ran; the runs so far, by job: %v", msg, r.by)
			return nil
		}
	}
}

// startWorkerProcesses starts n clients on ts's schema, each with a store (and pool) of its own, as
// separate processes would have, maxWorkers workers each and no poll to speak of: only
// notifications make them claim. Jobs with Message "block" wait for release.
func startWorkerProcesses(t *testing.T, ts *testStore, n, maxWorkers int, ran *ranOn, release <-chan struct{}) ([]*pronto.Client, []*claimCounter) {
	t.Helper()
	clients := make([]*pronto.Client, n)
	counters := make([]*claimCounter, n)
	for i := range n {
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			ran.record(i, j.Args.Message)
			if j.Args.Message == "block" {
				<-release
			}
			return nil
		}))
		// A lease that outlasts any stall of a loaded machine: "block" runs until the test ends, and
		// a lapsed lease would have it rescued and claimed by the free process, leaving neither
		// with a free worker (fastConfig's one-second lease lapsed once in a CI run).
		cfg := heldConfig(workers, defaultQueue(maxWorkers))
		cfg.PollInterval = time.Hour
		counters[i] = &claimCounter{Store: ts.reopen(t)}
		clients[i] = startClient(t, counters[i], cfg)
	}
	for i, c := range clients {
		require.Eventually(t, func() bool { return pronto.PresencePeers(c, pronto.DefaultQueue) == n-1 },
			10*time.Second, 10*time.Millisecond, "client %d hears the other %d", i, n-1)
	}
	return clients, counters
}

func totalClaims(counters []*claimCounter) int64 {
	var n int64
	for _, c := range counters {
		n += c.claims.Load()
	}
	return n
}

// TestOneProcessClaimsEachAnnouncedJob: of several processes working a queue, only the one an
// insert notification picks claims its job, where every process used to claim (three claims a job
// here, two of them finding nothing); the jobs are shared out among them.
func TestOneProcessClaimsEachAnnouncedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	ran := newRanOn()
	_, counters := startWorkerProcesses(t, ts, 3, 4, ran, nil)
	inserter, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)

	before := totalClaims(counters)
	const jobs = 60
	perClient := make([]int, 3)
	for i := range jobs {
		msg := "job-" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		_, err := inserter.Insert(ctx, echoArgs{Message: msg}, nil)
		require.NoError(t, err)
		by := ran.wait(t, msg)
		require.Len(t, by, 1, "job %s ran once", msg)
		perClient[by[0]]++
	}
	claims := totalClaims(counters) - before
	t.Logf("%d claims for %d jobs; jobs per client %v", claims, jobs, perClient)
	require.Less(t, claims, int64(jobs*3/2), "about one claim a job, not one per process")
	for i, n := range perClient {
		require.GreaterOrEqual(t, n, 5, "client %d got its share: %v", i, perClient)
	}
}

// TestOverflowWhenTheChosenProcessIsFull: a process picked to claim a job while all its workers are
// busy hands the job to the others at once, instead of holding it until a worker frees.
func TestOverflowWhenTheChosenProcessIsFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	ran := newRanOn()
	release := make(chan struct{})
	defer close(release)
	startWorkerProcesses(t, ts, 2, 1, ran, release)
	inserter, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)

	_, err = inserter.Insert(ctx, echoArgs{Message: "block"}, nil)
	require.NoError(t, err)
	busy := ran.wait(t, "block")[0]
	// Half of these are announced to the busy process (one worker, held by "block"): each must run
	// on the other one, and now, not when "block" ends (never, within the test).
	for i := range 12 {
		msg := "quick-" + string(rune('a'+i))
		_, err := inserter.Insert(ctx, echoArgs{Message: msg}, nil)
		require.NoError(t, err)
		by := ran.wait(t, msg)
		require.Equal(t, []int{1 - busy}, by, "job %s ran on the free process", msg)
	}
}

// TestStoppedProcessHandsOverAtOnce: a client that stops says so, and the others stop leaving jobs
// to it at once, not when its presence expires (minutes here).
func TestStoppedProcessHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	ran := newRanOn()
	var clients []*pronto.Client
	for i := range 2 {
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			ran.record(i, j.Args.Message)
			return nil
		}))
		cfg := fastConfig(workers, defaultQueue(2))
		cfg.PollInterval = time.Hour
		c, err := pronto.NewClient(ts.reopen(t), cfg)
		require.NoError(t, err)
		// One announcement each, at start: the second's reaches the first, which is all this needs.
		pronto.SetPresenceInterval(c, 10*time.Minute)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		clients = append(clients, c)
	}
	first, second := clients[0], clients[1]
	require.Eventually(t, func() bool { return pronto.PresencePeers(first, pronto.DefaultQueue) == 1 },
		10*time.Second, 10*time.Millisecond)
	require.NoError(t, second.Stop(ctx))
	require.Eventually(t, func() bool { return pronto.PresencePeers(first, pronto.DefaultQueue) == 0 },
		10*time.Second, 10*time.Millisecond, "the stopped client's goodbye reached the other")

	inserter, err := pronto.NewClient(ts.Store, nil)
	require.NoError(t, err)
	for i := range 10 {
		msg := "after-" + string(rune('a'+i))
		_, err := inserter.Insert(ctx, echoArgs{Message: msg}, nil)
		require.NoError(t, err)
		require.Equal(t, []int{0}, ran.wait(t, msg), "job %s ran on the remaining client", msg)
	}
}
