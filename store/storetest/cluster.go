package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/store"
)

func testElect(t *testing.T, s store.Store) {
	const name = "maintenance"
	ok, err := s.Elect(ctx(t), name, "client-a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "the first candidate leads")
	ok, err = s.Elect(ctx(t), name, "client-b", time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "another candidate does not lead while the leader's term runs")
	ok, err = s.Elect(ctx(t), name, "client-a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "the leader's re-election renews its term")

	ok, err = s.Elect(ctx(t), "other-name", "client-b", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "names are led independently")

	require.NoError(t, s.Resign(ctx(t), name, "client-b"), "resigning what one does not hold is harmless")
	ok, err = s.Elect(ctx(t), name, "client-b", time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a non-leader's resignation does not end the leader's term")

	require.NoError(t, s.Resign(ctx(t), name, "client-a"))
	ok, err = s.Elect(ctx(t), name, "client-b", time.Hour)
	require.NoError(t, err)
	require.True(t, ok, "after the leader resigns, another candidate leads at once")
	ok, err = s.Elect(ctx(t), name, "client-a", time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
}

func testElectAfterTTL(t *testing.T, s store.Store) {
	const name = "maintenance"
	start := time.Now()
	ok, err := s.Elect(ctx(t), name, "client-a", 150*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	eventually(t, "the lapsed leader to be replaced", func() bool {
		ok, err := s.Elect(ctx(t), name, "client-b", time.Hour)
		require.NoError(t, err)
		if ok {
			require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond,
				"the leader's term is not cut short")
		}
		return ok
	})
	ok, err = s.Elect(ctx(t), name, "client-a", time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "the lapsed leader does not take it back while the new term runs")

	// Renewing keeps a short term alive past its first expiry.
	ok, err = s.Elect(ctx(t), "renewed", "client-a", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		ok, err = s.Elect(ctx(t), "renewed", "client-a", time.Second)
		require.NoError(t, err)
		require.True(t, ok, "a leader renewing in time keeps leading")
		ok, err = s.Elect(ctx(t), "renewed", "client-b", time.Hour)
		require.NoError(t, err)
		require.False(t, ok, "nobody else leads while the leader renews")
		time.Sleep(100 * time.Millisecond)
	}
}

// reopen returns a second view of s's data.
func reopen(t *testing.T, h Harness, s store.Store) store.Store {
	if h.Reopen == nil {
		return s
	}
	s2 := h.Reopen(t, s)
	require.NotNil(t, s2, "Harness.Reopen returned nil")
	return s2
}

func testReopenSharesData(t *testing.T, h Harness) {
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	p := job("shared")
	insert(t, s1, p)
	requireInserted(t, p, get(t, s2, p.ID))
	claimed := claim(t, s2, "shared", 10)
	require.Equal(t, []string{p.ID}, ids(claimed), "a job inserted by one client is claimed by another")
	require.Empty(t, claim(t, s1, "shared", 10), "and by no one else")
	require.True(t, finish(t, s1, store.Completion{ID: p.ID, Attempt: 1, State: store.StateCompleted}))
	require.Equal(t, store.StateCompleted, get(t, s2, p.ID).State)

	require.NoError(t, s2.PauseQueue(ctx(t), "shared"))
	insert(t, s1, job("shared"))
	require.Empty(t, claim(t, s1, "shared", 10), "a pause holds for every client")
	require.NoError(t, s1.ResumeQueue(ctx(t), "shared"))
	require.Len(t, claim(t, s2, "shared", 10), 1)

	ok, err := s1.Elect(ctx(t), "shared", "client-1", time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s2.Elect(ctx(t), "shared", "client-2", time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "leadership is one across clients")
}

func testConcurrentClaims(t *testing.T, h Harness) { concurrentClaims(t, h, 0) }

// testFairConcurrentClaims is testConcurrentClaims over jobs of 7 tenants and some without one:
// claims in turns never hand a job to two claimers either.
func testFairConcurrentClaims(t *testing.T, h Harness) { concurrentClaims(t, h, 7) }

// concurrentClaims has workers on two clients drain a queue concurrently and requires every job
// claimed exactly once; with tenants > 0, most jobs have one of that many tenants.
func concurrentClaims(t *testing.T, h Harness, tenants int) {
	const (
		total   = 2000
		workers = 8
		queue   = "contended"
	)
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	var all []string
	for b := 0; b < total; b += 500 {
		var params []*store.InsertParams
		for range 500 {
			p := job(queue)
			p.Priority = rand.IntN(3)
			if tenants > 0 && rand.IntN(10) > 0 {
				p.Tenant = fmt.Sprintf("tenant-%d", rand.IntN(tenants))
			}
			params = append(params, p)
		}
		insert(t, s1, params...)
		all = append(all, paramIDs(params)...)
	}

	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		wg      sync.WaitGroup
	)
	errs := make(chan error, workers)
	for w := range workers {
		st := s1
		if w%2 == 1 {
			st = s2
		}
		workerID := fmt.Sprintf("worker-%d", w)
		rng := rand.New(rand.NewPCG(uint64(w), 42))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- claimLoop(t, st, queue, workerID, rng, func(id string) {
				mu.Lock()
				claimed[id]++
				mu.Unlock()
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	require.Len(t, claimed, total, "every job was claimed")
	for id, n := range claimed {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
	}
	require.ElementsMatch(t, all, keys(claimed))
	require.Empty(t, claim(t, s1, queue, 10))
	q, ok := queueInfo(t, s2, queue)
	require.True(t, ok)
	require.Equal(t, int64(total), q.Counts[store.StateCompleted], "every job completed")
	require.Equal(t, int64(total), q.Counts[store.StateCompleted]+q.Counts[store.StateActive]+
		q.Counts[store.StateAvailable], "no job lost")
}

// claimLoop claims batches of 1 to 50 jobs and completes them until the queue is empty.
func claimLoop(t *testing.T, s store.Store, queue, workerID string, rng *rand.Rand, record func(string)) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		jobs, err := s.Claim(ctx(t), store.ClaimParams{
			Queue: queue, Limit: 1 + rng.IntN(50), WorkerID: workerID, LeaseDuration: lease,
		})
		if err != nil {
			return fmt.Errorf("%s: claim: %w", workerID, err)
		}
		if len(jobs) == 0 {
			return nil
		}
		cs := make([]store.Completion, len(jobs))
		for i, j := range jobs {
			if j.State != store.StateActive || j.WorkerID != workerID || j.Attempt != 1 {
				return fmt.Errorf("%s: claimed job %s is %s for %q in attempt %d", workerID, j.ID, j.State, j.WorkerID, j.Attempt)
			}
			record(j.ID)
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
		}
		res, err := s.Finish(ctx(t), cs)
		if err != nil {
			return fmt.Errorf("%s: finish: %w", workerID, err)
		}
		for _, r := range res {
			if !r.Applied {
				return fmt.Errorf("%s: completion of job %s it holds was not applied", workerID, r.ID)
			}
		}
	}
	return fmt.Errorf("%s: queue not drained in time", workerID)
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testProducersRunEachJobOnce runs a producer loop in each of two views of the store (as two
// processes would, each woken by its own notifier, the poll an hour) while a third view inserts
// single jobs and small batches from three goroutines: every job runs exactly once. On the stores
// with a hand-off (PostgreSQL, Redis) most single inserts are handed to a waiting producer, the
// rest claimed after a notification, and the two must never both take a job.
func testProducersRunEachJobOnce(t *testing.T, h Harness) {
	ins := h.New(t)
	const queue = "many"
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		done atomic.Int32
	)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 2 {
		s := reopen(t, h, ins)
		p := producer.New(producer.Config{Queue: queue, MaxWorkers: 3, PollInterval: time.Hour,
			Claim: func(ctx context.Context, limit int) ([]*store.Job, error) {
				return s.Claim(ctx, store.ClaimParams{Queue: queue, Limit: limit,
					WorkerID: worker + string(rune('a'+w)), LeaseDuration: time.Minute})
			},
			Execute: func(j *store.Job, _ time.Time, release func()) {
				go func() {
					defer release()
					mu.Lock()
					runs[j.ID]++
					mu.Unlock()
					res, err := s.Finish(context.Background(), []store.Completion{{ID: j.ID, Attempt: j.Attempt,
						Token: j.ClaimToken, State: store.StateCompleted}})
					if err == nil && res[0].Applied {
						done.Add(1)
					}
				}()
			}})
		t.Cleanup(s.Notifier().Subscribe(func(n store.Notification) {
			if n.Queue == queue && n.Kind == store.NotifyInsert || n.Kind == store.NotifyReconnect {
				p.Wake()
			}
		}))
		wg.Add(1)
		go func() { defer wg.Done(); p.Run(runCtx) }()
	}
	var total atomic.Int32
	var iw sync.WaitGroup
	for g := range 3 {
		iw.Add(1)
		go func() {
			defer iw.Done()
			for i := range 60 {
				batch := []*store.InsertParams{job(queue)}
				if (i+g)%10 == 0 {
					batch = append(batch, job(queue), job(queue))
				}
				if _, err := ins.Insert(context.Background(), batch); err != nil {
					t.Error(err)
					return
				}
				total.Add(int32(len(batch)))
				if (i+g)%7 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	iw.Wait()
	require.Eventually(t, func() bool { return done.Load() == total.Load() }, 30*time.Second, 10*time.Millisecond,
		"every job completes")
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, int(total.Load()))
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
}
