package redis

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// rateChildEnv starts the helper process of TestClusterRateLimitKilledProcess (see TestMain): its
// value is the cluster's addresses (comma-separated), the store's prefix, the queue and the limit's
// number of jobs to hold, tab-separated. The helper claims that many jobs of the queue with a short
// lease, prints "held ID" for each, and then waits to be killed without finishing them.
const rateChildEnv = "PRONTO_REDIS_RATE_CHILD"

// childStore opens, in a helper process, the store a test process named in v ("addrs\tprefix\t..."
// with n fields in all, addrs comma-separated): a store on the test's cluster under its prefix,
// and v's fields. It returns the exit code to leave with when that fails.
func childStore(v string, n int, want string) (*Store, []string, int) {
	parts := strings.Split(v, "\t")
	if len(parts) != n {
		fmt.Fprintln(os.Stderr, "want", want)
		return nil, nil, 2
	}
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(parts[0], ",")})
	s, err := New(context.Background(), rdb, Options{Prefix: parts[1]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, nil, 1
	}
	return s, parts, 0
}

// startChild starts this test binary as a helper process (env names which, see TestMain) on the
// test's cluster and store, with fields after the cluster's addresses and the store's prefix (see
// childStore), killed when the test ends, and returns it with a scanner of its output.
func startChild(t *testing.T, env string, rdb *goredis.ClusterClient, s *Store, fields ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	v := append([]string{strings.Join(rdb.Options().Addrs, ","), s.Prefix()}, fields...)
	cmd.Env = append(os.Environ(), env+"="+strings.Join(v, "\t"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

func runRateChild(v string) int {
	s, parts, code := childStore(v, 4, "addrs, prefix, queue, count")
	if s == nil {
		return code
	}
	var want int
	fmt.Sscan(parts[3], &want)
	ctx := context.Background()
	for held := 0; held < want; {
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: parts[2], Limit: want - held, WorkerID: "doomed", LeaseDuration: 300 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, j := range jobs {
			fmt.Printf("held %s\n", j.ID)
		}
		held += len(jobs)
	}
	select {} // killed by the test
}

// limitedTestJob is a job of queue under rate key.
func limitedTestJob(queue, key string) *store.InsertParams {
	p := testJob(queue)
	p.RateKey = key
	return p
}

// ledgerSizes returns how many entries key's ledger and reservations hold.
func ledgerSizes(t *testing.T, s *Store, key string) (active, reserved int64) {
	t.Helper()
	ctx := context.Background()
	active, err := s.rdb.ZCard(ctx, s.rateBase(key)+"act").Result()
	require.NoError(t, err)
	reserved, err = s.rdb.ZCard(ctx, s.rateBase(key)+"res").Result()
	require.NoError(t, err)
	return active, reserved
}

// twoClusterStores starts a local cluster and opens two stores on it, each with a client of its
// own (as two processes would), and names a queue on each master.
func twoClusterStores(t *testing.T) (*goredis.ClusterClient, *Store, *Store, []string) {
	t.Helper()
	rdb, s1, queues := migratedCluster(t)
	rdb2 := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rdb.Options().Addrs})
	t.Cleanup(func() { _ = rdb2.Close() })
	return rdb, s1, clusterStore(t, rdb2), queues
}

// TestClusterRateLimits checks a rate limit on a local 3-master Redis Cluster, whose limit lives in
// another slot than the queues it holds (ratelimit.go): max_active holds across queues on every
// master and two stores claiming at once; a permit a claimer took and never confirmed counts until
// it expires and is never taken for the key's exhaustion (no job is dropped for it); permits of jobs
// that left active without Finish (rescued, cancelled while running) come back.
func TestClusterRateLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s1, s2, queues := twoClusterStores(t)

	// max_active across three queues (three masters) and two stores, six claimers.
	const maxActive, perQueue, claimers = 4, 30, 6
	require.NoError(t, s1.SetRateLimit(ctx, "shared", store.RateLimit{MaxActive: maxActive}))
	for _, q := range queues {
		var batch []*store.InsertParams
		for range perQueue {
			batch = append(batch, limitedTestJob(q, "shared"))
		}
		_, err := s1.Insert(ctx, batch)
		require.NoError(t, err)
	}
	var running, peak, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for w := range claimers {
		st, q := s1, queues[w%len(queues)]
		if w%2 == 1 {
			st = s2
		}
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Minute)
			for done.Load() < perQueue*int64(len(queues)) {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("claimer %d: jobs not drained in a minute", w)
					return
				}
				jobs, err := st.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1 + rng.IntN(3), WorkerID: fmt.Sprint("w", w), LeaseDuration: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					// This queue is drained or the key is full: help another queue.
					q = queues[rng.IntN(len(queues))]
					time.Sleep(time.Millisecond)
					continue
				}
				n := running.Add(int64(len(jobs)))
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
				running.Add(-int64(len(jobs)))
				cs := make([]store.Completion, len(jobs))
				for i, j := range jobs {
					cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
				}
				if _, err := st.Finish(ctx, cs); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(jobs)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, perQueue*int64(len(queues)), done.Load(), "every job ran once")
	require.LessOrEqual(t, peak.Load(), int64(maxActive), "never more than max_active at once, across queues and stores")
	require.Positive(t, peak.Load())
	act, res := ledgerSizes(t, s1, "shared")
	require.Zero(t, act, "every permit came back with its job's outcome")
	require.Zero(t, res, "no reservation is left")

	// A claimer that took a permit and died before confirming it: the permit counts until its
	// reservation expires, and the key is not exhausted by it, so on_limit drop drops nothing.
	require.NoError(t, s1.SetRateLimit(ctx, "dying", store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop}))
	d := limitedTestJob(queues[0], "dying")
	_, err := s1.Insert(ctx, []*store.InsertParams{d})
	require.NoError(t, err)
	granted, err := scriptRateAcquire.Run(ctx, rdb, []string{s1.rateBase("dying")}, 1, "lost", (300 * time.Millisecond).Microseconds()).Slice()
	require.NoError(t, err)
	require.Equal(t, int64(1), granted[0], "the lost claimer's permit")
	got, err := s2.Claim(ctx, store.ClaimParams{Queue: queues[0], Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, got, "the reserved permit counts")
	j, err := s1.GetJob(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State, "a key busy with another claim's permit drops nothing")
	require.Eventually(t, func() bool {
		got, err := s2.Claim(ctx, store.ClaimParams{Queue: queues[0], Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return len(got) == 1 && got[0].ID == d.ID
	}, 20*time.Second, 10*time.Millisecond, "the unconfirmed permit expires")

	// Permits of jobs that leave active without Finish: a job rescued when its lease ran out, then
	// a job cancelled while running.
	require.NoError(t, s1.SetRateLimit(ctx, "lost", store.RateLimit{MaxActive: 1}))
	var lost []*store.InsertParams
	for range 3 {
		lost = append(lost, limitedTestJob(queues[1], "lost"))
	}
	_, err = s1.Insert(ctx, lost)
	require.NoError(t, err)
	first, err := s2.Claim(ctx, store.ClaimParams{Queue: queues[1], Limit: 5, WorkerID: "w", LeaseDuration: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Eventually(t, func() bool {
		res, err := s1.Rescue(ctx, store.RescueParams{Limit: 100})
		require.NoError(t, err)
		if len(res.Requeued) == 0 {
			return false
		}
		act, _ := ledgerSizes(t, s1, "lost")
		return act == 0
	}, 20*time.Second, 10*time.Millisecond, "the rescue pass gives the rescued job's permit back")
	second, err := s1.Claim(ctx, store.ClaimParams{Queue: queues[1], Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, second, 1)
	_, err = s1.CancelJob(ctx, second[0].ID)
	require.NoError(t, err)
	var third []*store.Job
	require.Eventually(t, func() bool {
		third, err = s2.Claim(ctx, store.ClaimParams{Queue: queues[1], Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return len(third) == 1
	}, 20*time.Second, 10*time.Millisecond, "the cancelled job's permit comes back")
	info, err := s1.GetRateLimit(ctx, "lost")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Active)
	// Finished by the other store (which did not claim it): its permit comes back all the same.
	res2, err := s1.Finish(ctx, []store.Completion{{ID: third[0].ID, Attempt: third[0].Attempt, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res2[0].Applied)
	act, _ = ledgerSizes(t, s1, "lost")
	require.Zero(t, act)
}

// TestClusterTenantLimits checks a tenant's limit on a local 3-master Redis Cluster: it bounds the
// tenant's running jobs across queues on every master and two stores, a finished job frees its
// permit, another tenant is not held back, a rate window holds, and a deleted limit frees the tenant
// at once for the store that deleted it.
func TestClusterTenantLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s1, s2, queues := twoClusterStores(t)
	claimAll := func(st *Store) map[string][]*store.Job {
		t.Helper()
		got := map[string][]*store.Job{}
		for _, q := range queues {
			jobs, err := st.Claim(ctx, store.ClaimParams{Queue: q, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			for _, j := range jobs {
				got[j.Tenant] = append(got[j.Tenant], j)
			}
		}
		return got
	}

	require.NoError(t, s1.SetRateLimit(ctx, store.TenantLimitKey("A"), store.RateLimit{MaxActive: 2}))
	for _, q := range queues {
		var batch []*store.InsertParams
		for i := range 6 {
			j := testJob(q)
			j.Tenant = "A"
			if i%3 == 2 {
				j.Tenant = "B"
			}
			batch = append(batch, j)
		}
		_, err := s1.Insert(ctx, batch)
		require.NoError(t, err)
	}
	got := claimAll(s2)
	require.Len(t, got["A"], 2, "A's limit spans the queues of every master")
	require.Len(t, got["B"], 6, "B is not held back")
	require.Empty(t, claimAll(s1)["A"], "A's limit holds for the other store too")
	info, err := s1.GetRateLimit(ctx, store.TenantLimitKey("A"))
	require.NoError(t, err)
	require.Equal(t, 2, info.Limit.MaxActive)

	// A finished job of A frees one permit, whichever store finishes it.
	res, err := s1.Finish(ctx, []store.Completion{{ID: got["A"][0].ID, Attempt: 1, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	require.Len(t, claimAll(s1)["A"], 1, "a finished job frees one permit")
	require.Empty(t, claimAll(s2)["A"])

	// A rate: two starts per window, across the queues.
	require.NoError(t, s1.SetRateLimit(ctx, store.TenantLimitKey("C"), store.RateLimit{Rate: 2, Period: time.Hour}))
	for _, q := range queues {
		j := testJob(q)
		j.Tenant = "C"
		_, err := s1.Insert(ctx, []*store.InsertParams{j})
		require.NoError(t, err)
	}
	require.Len(t, claimAll(s1)["C"], 2, "two starts in the window")
	require.Empty(t, claimAll(s1)["C"])

	// Without its limit the tenant runs freely.
	require.NoError(t, s1.DeleteRateLimit(ctx, store.TenantLimitKey("C")))
	require.Len(t, claimAll(s1)["C"], 1)
}

// TestClusterRateLimitKilledProcess: a process holding all of a key's permits is killed; while it
// lives no other process gets one, and once its jobs' leases run out the survivor rescues them and
// drains every job under the limit.
func TestClusterRateLimitKilledProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, s, queues := migratedCluster(t)
	const maxActive = 2
	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: maxActive}))
	var batch []*store.InsertParams
	for i := range 10 {
		batch = append(batch, limitedTestJob(queues[i%len(queues)], "k"))
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)

	cmd, sc := startChild(t, rateChildEnv, rdb, s, queues[0], fmt.Sprint(maxActive))
	held := map[string]bool{}
	for len(held) < maxActive && sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "held ")
		require.True(t, ok, "helper said %q", sc.Text())
		held[id] = true
	}
	require.Len(t, held, maxActive, "the helper holds every permit")
	for _, q := range queues {
		got, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Empty(t, got, "the helper's permits hold queue %s", q)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	finished := map[string]bool{}
	require.Eventually(t, func() bool {
		_, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
		require.NoError(t, err)
		for _, q := range queues {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 5, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.LessOrEqual(t, len(jobs), maxActive)
			info, err := s.GetRateLimit(ctx, "k")
			require.NoError(t, err)
			require.LessOrEqual(t, info.Active, int64(maxActive), "never more than max_active")
			cs := make([]store.Completion, len(jobs))
			for i, j := range jobs {
				cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
				finished[j.ID] = true
			}
			_, err = s.Finish(ctx, cs)
			require.NoError(t, err)
		}
		return len(finished) == len(batch)
	}, 30*time.Second, 10*time.Millisecond, "every job, the dead helper's too, runs once its permits come back")
	for id := range held {
		require.True(t, finished[id], "the helper's job %s was rescued and ran", id)
	}
}

// TestClusterClaimAsksAgain: a claim on a cluster first asks for the permits its queue's last claim
// used (for as many jobs as then), asks again when it uses them up while jobs of the key remain,
// confirms each reservation's permits (the window counts each start once), stops asking when the
// key is exhausted, and forgets a key the queue has no job of.
func TestClusterClaimAsksAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s, _, queues := twoClusterStores(t)
	q := queues[0]
	claim := func(limit int) []*store.Job {
		t.Helper()
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: limit, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		return jobs
	}
	remember := func(key string, n int) {
		s.needsMu.Lock()
		s.needs[q] = []need{{key: key, n: n}}
		s.needsMu.Unlock()
	}

	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 6}))
	var batch []*store.InsertParams
	for range 6 {
		batch = append(batch, limitedTestJob(q, "k"))
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	require.Len(t, claim(1), 1)
	require.Equal(t, "k", s.knownNeeds(q, 10)[0].key, "the queue's claim remembers the key")
	remember("k", 1)
	require.Len(t, claim(10), 5, "a claim that used up the permits it asked for first asks again")
	act, res := ledgerSizes(t, s, "k")
	require.Equal(t, int64(6), act, "every permit of both reservations is confirmed")
	require.Zero(t, res)
	_, err = s.Insert(ctx, []*store.InsertParams{limitedTestJob(q, "k")})
	require.NoError(t, err)
	require.Empty(t, claim(10), "the key is exhausted: no permit, no job")

	// Two reservations in one rate window: each start counts once.
	require.NoError(t, s.SetRateLimit(ctx, "w", store.RateLimit{Rate: 3, Period: time.Hour}))
	wq := queues[1]
	batch = nil
	for range 5 {
		batch = append(batch, limitedTestJob(wq, "w"))
	}
	_, err = s.Insert(ctx, batch)
	require.NoError(t, err)
	s.needsMu.Lock()
	s.needs[wq] = []need{{key: "w", n: 1}}
	s.needsMu.Unlock()
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: wq, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 3, "the window admits its rate, over two reservations")
	info, err := s.GetRateLimit(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, int64(3), info.WindowCount)

	// A queue with no job of a remembered key forgets it.
	eq := queues[2]
	s.needsMu.Lock()
	s.needs[eq] = []need{{key: "k", n: 3}}
	s.needsMu.Unlock()
	jobs, err = s.Claim(ctx, store.ClaimParams{Queue: eq, Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Empty(t, s.knownNeeds(eq, 10), "an unused key is forgotten")
	_, res = ledgerSizes(t, s, "k")
	require.Zero(t, res, "its permits went back")
}
