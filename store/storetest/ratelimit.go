package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// clockSlack is how far apart the test's clock and the store's may read when both are asked at the
// same moment on one machine, beyond the store's time precision.
const clockSlack = 50 * time.Millisecond

// limiter returns s as a store.RateLimiter, failing the test if it is not one.
func limiter(t testing.TB, s store.Store) store.RateLimiter {
	t.Helper()
	l, ok := s.(store.RateLimiter)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.RateLimiter", s)
	}
	return l
}

// setLimit stores l under key.
func setLimit(t testing.TB, s store.Store, key string, l store.RateLimit) {
	t.Helper()
	require.NoError(t, limiter(t, s).SetRateLimit(ctx(t), key, l))
}

// limitInfo returns the limit under key with its use, requiring it to exist.
func limitInfo(t testing.TB, s store.Store, key string) *store.RateLimitInfo {
	t.Helper()
	info, err := limiter(t, s).GetRateLimit(ctx(t), key)
	require.NoError(t, err)
	require.Equal(t, key, info.Key)
	return info
}

// limitedJob returns the parameters of an available job in queue subject to the limit under key.
func limitedJob(queue, key string) *store.InsertParams {
	p := job(queue)
	p.RateKey = key
	return p
}

// limitedJobs returns n limitedJob parameters.
func limitedJobs(queue, key string, n int) []*store.InsertParams {
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = limitedJob(queue, key)
	}
	return ps
}

// requireLimit requires a stored limit to be want; an OnLimit of "" reads back as "" or LimitWait.
func requireLimit(t testing.TB, want, got store.RateLimit) {
	t.Helper()
	if want.OnLimit == "" && got.OnLimit == store.LimitWait {
		got.OnLimit = ""
	}
	require.Equal(t, want, got)
}

// requireBetween requires lo <= got <= hi, give or take the store's precision and clock.
func requireBetween(t testing.TB, lo, hi, got time.Time, what string) {
	t.Helper()
	slack := precision + clockSlack
	require.False(t, got.Before(lo.Add(-slack)), "%s: %v is before %v", what, got, lo)
	require.False(t, got.After(hi.Add(slack)), "%s: %v is after %v", what, got, hi)
}

// finishAll completes jobs and requires every completion to apply.
func finishAll(t testing.TB, s store.Store, jobs []*store.Job) {
	t.Helper()
	cs := make([]store.Completion, len(jobs))
	for i, j := range jobs {
		cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
	}
	res, err := s.Finish(ctx(t), cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied, "completion of %s applied", r.ID)
	}
}

func testRateLimitCRUD(t *testing.T, s store.Store) {
	l := limiter(t, s)
	_, err := l.GetRateLimit(ctx(t), "absent")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, l.DeleteRateLimit(ctx(t), "absent"), store.ErrNotFound)
	all, err := l.ListRateLimits(ctx(t))
	require.NoError(t, err)
	require.Empty(t, all)

	limits := map[string]store.RateLimit{
		"b": {MaxActive: 3},
		"a": {Rate: 10, Period: time.Minute, OnLimit: store.LimitReschedule},
		"c": {MaxActive: 1, Rate: 5, Period: 1500 * time.Millisecond, OnLimit: store.LimitDrop},
	}
	for _, k := range []string{"b", "a", "c"} {
		setLimit(t, s, k, limits[k])
	}
	for k, want := range limits {
		info := limitInfo(t, s, k)
		requireLimit(t, want, info.Limit)
		require.Zero(t, info.Active)
		require.Zero(t, info.Waiting)
		require.Zero(t, info.WindowCount)
	}
	all, err = l.ListRateLimits(ctx(t))
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i, k := range []string{"a", "b", "c"} {
		require.Equal(t, k, all[i].Key, "limits are listed in key order")
		requireLimit(t, limits[k], all[i].Limit)
	}

	// Setting a key again replaces its limit.
	setLimit(t, s, "b", store.RateLimit{MaxActive: 7, OnLimit: store.LimitWait})
	requireLimit(t, store.RateLimit{MaxActive: 7, OnLimit: store.LimitWait}, limitInfo(t, s, "b").Limit)

	require.NoError(t, l.DeleteRateLimit(ctx(t), "b"))
	_, err = l.GetRateLimit(ctx(t), "b")
	require.ErrorIs(t, err, store.ErrNotFound)
	all, err = l.ListRateLimits(ctx(t))
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "a", all[0].Key)
	require.Equal(t, "c", all[1].Key)
}

func testRateLimitMaxActive(t *testing.T, s store.Store) {
	q, other, key := uniq("rate-active"), uniq("rate-active-other"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 2})
	insert(t, s, limitedJobs(q, key, 5)...)
	insert(t, s, limitedJob(other, key))

	first := claim(t, s, q, 10)
	require.Len(t, first, 2, "a claim takes only the key's free slots")
	require.Empty(t, claim(t, s, q, 10), "no slot is left")
	require.Empty(t, claim(t, s, other, 10), "the limit holds across queues")
	info := limitInfo(t, s, key)
	require.Equal(t, int64(2), info.Active)
	require.Equal(t, int64(4), info.Waiting)

	c := listen(t, s)
	finishAll(t, s, first[:1])
	eventually(t, "the queue of the finished limited job to be announced", func() bool {
		return len(c.matching(func(n store.Notification) bool {
			return n.Kind == store.NotifyInsert && n.Queue == q && n.DueAt.IsZero()
		})) > 0
	})
	next := claim(t, s, q, 10)
	require.Len(t, next, 1, "a finished job frees one slot")
	require.Empty(t, claim(t, s, other, 10))

	// Any way out of active frees a slot: a retry too.
	require.True(t, finish(t, s, store.Completion{ID: next[0].ID, Attempt: 1, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(time.Hour)}))
	require.Len(t, claim(t, s, other, 10), 1)
	require.Equal(t, int64(2), limitInfo(t, s, key).Active)
}

func testRateLimitWindow(t *testing.T, s store.Store) {
	const period = 300 * time.Millisecond
	q, key := uniq("rate-window"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{Rate: 2, Period: period})
	insert(t, s, limitedJobs(q, key, 5)...)

	start := time.Now()
	first := claim(t, s, q, 10)
	opened := time.Now()
	require.Len(t, first, 2, "a window admits Rate claims")
	info := limitInfo(t, s, key)
	more := claim(t, s, q, 10)
	next, due, err := s.NextDue(ctx(t), q)
	require.NoError(t, err)
	if time.Since(start) < period-clockSlack { // still inside the first window
		require.Empty(t, more, "an exhausted window admits no more claims")
		require.Equal(t, int64(2), info.WindowCount)
		requireBetween(t, start, opened, info.WindowStart, "the window starts at its first claim")
		require.True(t, due, "NextDue reports the end of the window of the queue's waiting limited jobs")
		requireBetween(t, start.Add(period), opened.Add(period), next, "NextDue is the window's end")
	}
	claimed := len(first) + len(more)
	eventually(t, "every limited job to be claimed window by window", func() bool {
		got := claim(t, s, q, 10)
		require.LessOrEqual(t, len(got), 2, "no window admits more than Rate claims")
		claimed += len(got)
		return claimed == 5
	})
	require.GreaterOrEqual(t, time.Since(start), 2*period-precision-clockSlack,
		"five jobs at two per window need three windows")
}

func testRateLimitSkipKeepsOrder(t *testing.T, s store.Store) {
	q, key := uniq("rate-skip"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1})
	mk := func(priority int, limited bool) *store.InsertParams {
		p := job(q)
		p.Priority = priority
		if limited {
			p.RateKey = key
		}
		return p
	}
	a, b, c, d := mk(10, true), mk(5, true), mk(3, false), mk(1, false)
	insert(t, s, d, b, c, a)
	got := claim(t, s, q, 10)
	require.Equal(t, []string{a.ID, c.ID, d.ID}, ids(got),
		"the claim takes its own first limited job into account and keeps priority order among the rest")
	require.Equal(t, store.StateAvailable, get(t, s, b.ID).State, "a job held back waits")

	// Many exhausted jobs ahead do not starve the claim.
	var ps []*store.InsertParams
	for range 50 {
		ps = append(ps, mk(20, true))
	}
	low := []*store.InsertParams{mk(0, false), mk(0, false), mk(0, false)}
	insert(t, s, append(ps, low...)...)
	got = claim(t, s, q, 3)
	require.Equal(t, paramIDs(low), ids(got), "the claim reaches past the exhausted key's jobs")

	// A limited job with a free key is taken in its priority place.
	require.True(t, finish(t, s, store.Completion{ID: a.ID, Attempt: 1, State: store.StateCompleted}))
	last := []*store.InsertParams{mk(-1, false)}
	insert(t, s, last...)
	got = claim(t, s, q, 2)
	require.Len(t, got, 2)
	require.Equal(t, key, got[0].RateKey, "the highest-priority limited job goes first when the key has room")
	require.Equal(t, 20, got[0].Priority)
	require.Equal(t, last[0].ID, got[1].ID)
}

func testRateLimitDrop(t *testing.T, s store.Store) {
	q, key := uniq("rate-drop"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop})
	a, b := limitedJob(q, key), limitedJob(q, key)
	insert(t, s, a, b)
	require.Equal(t, []string{a.ID}, ids(claim(t, s, q, 10)))
	require.Empty(t, claim(t, s, q, 10))
	j := get(t, s, b.ID)
	require.Equal(t, store.StateDiscarded, j.State, "a job its limit holds back is dropped")
	requireNow(t, j.CompletedAt, "completed_at of the dropped job")
	require.NotEmpty(t, j.Errors)
	require.Equal(t, "rate_limited", j.Errors[len(j.Errors)-1].Type)
	require.Equal(t, store.StateActive, get(t, s, a.ID).State)
}

func testRateLimitReschedule(t *testing.T, s store.Store) {
	q, key := uniq("rate-resched"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1, OnLimit: store.LimitReschedule})
	a, b := limitedJob(q, key), limitedJob(q, key)
	insert(t, s, a, b)
	start := time.Now()
	first := claim(t, s, q, 10)
	require.Equal(t, []string{a.ID}, ids(first))
	require.Empty(t, claim(t, s, q, 10))
	end := time.Now()
	j := get(t, s, b.ID)
	require.Equal(t, store.StateScheduled, j.State, "a job its concurrency limit holds back is rescheduled")
	requireBetween(t, start.Add(time.Second), end.Add(time.Second), j.ScheduledAt,
		"a job held back by MaxActive is rescheduled one second on")
	finishAll(t, s, first)
	eventually(t, "the rescheduled job to run", func() bool { return len(claim(t, s, q, 10)) == 1 })
	require.Equal(t, store.StateActive, get(t, s, b.ID).State)

	// Held back by a rate window, it is rescheduled to the window's end.
	wq, wkey := uniq("rate-resched-window"), uniq("rate")
	setLimit(t, s, wkey, store.RateLimit{Rate: 1, Period: time.Hour, OnLimit: store.LimitReschedule})
	c, d := limitedJob(wq, wkey), limitedJob(wq, wkey)
	insert(t, s, c, d)
	start = time.Now()
	require.Equal(t, []string{c.ID}, ids(claim(t, s, wq, 10)))
	opened := time.Now()
	require.Empty(t, claim(t, s, wq, 10))
	j = get(t, s, d.ID)
	require.Equal(t, store.StateScheduled, j.State)
	requireBetween(t, start.Add(time.Hour), opened.Add(time.Hour), j.ScheduledAt, "rescheduled to the window's end")
}

func testRateLimitOnInsert(t *testing.T, s store.Store) {
	q, key := uniq("rate-insert"), uniq("rate")
	p := limitedJob(q, key)
	p.RateLimit = &store.RateLimit{MaxActive: 1}
	insert(t, s, p)
	requireLimit(t, store.RateLimit{MaxActive: 1}, limitInfo(t, s, key).Limit)

	// A later insert replaces the limit.
	p2, p3 := limitedJob(q, key), limitedJob(q, key)
	p2.RateLimit = &store.RateLimit{MaxActive: 2, OnLimit: store.LimitWait}
	insert(t, s, p2, p3)
	requireLimit(t, store.RateLimit{MaxActive: 2, OnLimit: store.LimitWait}, limitInfo(t, s, key).Limit)
	require.Len(t, claim(t, s, q, 10), 2, "the limit written by the insert is enforced")

	// A refused insert writes no limit.
	refusedKey := uniq("rate")
	existing := job(q)
	insert(t, s, existing)
	r := limitedJob(q, refusedKey)
	r.RateLimit = &store.RateLimit{MaxActive: 1}
	dup := job(q)
	dup.ID = existing.ID
	_, err := s.Insert(ctx(t), []*store.InsertParams{r, dup})
	require.ErrorIs(t, err, store.ErrDuplicate)
	_, err = limiter(t, s).GetRateLimit(ctx(t), refusedKey)
	require.ErrorIs(t, err, store.ErrNotFound, "the limit is written in the insert's transaction")
}

func testRateLimitUnlimited(t *testing.T, s store.Store) {
	q := uniq("rate-none")
	insert(t, s, limitedJobs(q, uniq("never-set"), 5)...)
	require.Len(t, claim(t, s, q, 10), 5, "a key without a stored limit limits nothing")

	key := uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1})
	insert(t, s, limitedJobs(q, key, 3)...)
	require.Len(t, claim(t, s, q, 10), 1)
	require.NoError(t, limiter(t, s).DeleteRateLimit(ctx(t), key))
	require.Len(t, claim(t, s, q, 10), 2, "a deleted limit limits nothing")

	// A stored limit whose fields are zero bounds nothing, so its action never applies.
	zq, zkey := uniq("rate-zero"), uniq("rate")
	setLimit(t, s, zkey, store.RateLimit{OnLimit: store.LimitDrop})
	insert(t, s, limitedJobs(zq, zkey, 4)...)
	require.Len(t, claim(t, s, zq, 10), 4, "a limit of zeros limits nothing")
	require.Equal(t, int64(4), limitInfo(t, s, zkey).Active)
}

func testRateLimitInfo(t *testing.T, s store.Store) {
	q, other, key := uniq("rate-info"), uniq("rate-info-other"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 2, Rate: 10, Period: time.Hour})
	dueNow := limitedJob(q, key)
	dueNow.State, dueNow.ScheduledAt = store.StateScheduled, time.Now().Add(-time.Minute)
	later := limitedJob(q, key)
	later.State, later.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	pending := limitedJob(q, key)
	pending.State = store.StatePending
	insert(t, s, append(limitedJobs(q, key, 3), dueNow, later, pending, limitedJob(other, key), job(q))...)

	info := limitInfo(t, s, key)
	require.Zero(t, info.Active)
	require.Equal(t, int64(5), info.Waiting, "available jobs and due scheduled ones wait, in every queue")
	require.Zero(t, info.WindowCount)

	start := time.Now()
	require.Len(t, claim(t, s, q, 10), 3, "two limited jobs and the unlimited one")
	info = limitInfo(t, s, key)
	require.Equal(t, int64(2), info.Active)
	require.Equal(t, int64(3), info.Waiting)
	require.Equal(t, int64(2), info.WindowCount)
	requireBetween(t, start, time.Now(), info.WindowStart, "window start")
	requireLimit(t, store.RateLimit{MaxActive: 2, Rate: 10, Period: time.Hour}, info.Limit)

	all, err := limiter(t, s).ListRateLimits(ctx(t))
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, info.Active, all[0].Active)
	require.Equal(t, info.Waiting, all[0].Waiting)
	require.Equal(t, info.WindowCount, all[0].WindowCount)
}

func testRateLimitConcurrent(t *testing.T, h Harness) {
	const (
		maxActive = 3
		total     = 60
	)
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	q, key := uniq("rate-race"), uniq("rate")
	setLimit(t, s1, key, store.RateLimit{MaxActive: maxActive})
	insert(t, s1, limitedJobs(q, key, total)...)

	peak, _ := drainConcurrently(t, []store.Store{s1, s2}, q, total, nil)
	require.LessOrEqual(t, peak, int64(maxActive), "never more than MaxActive jobs active at once")
	require.Positive(t, peak)
	q2, ok := queueInfo(t, s2, q)
	require.True(t, ok)
	require.Equal(t, int64(total), q2.Counts[store.StateCompleted])
}

// testRateLimitDeletedUnderConcurrentClaims: a key kept at its limit by six workers of two clients
// (whose claims may set its waiting jobs aside: PostgreSQL and SQLite hold them out of their claim
// index), with jobs without a limit behind its backlog; its limit is deleted while they claim. Every
// job runs once, the key's jobs then run as jobs without a limit, and none is left behind.
func testRateLimitDeletedUnderConcurrentClaims(t *testing.T, h Harness) {
	const (
		keyed = 150
		free  = 30
	)
	s1 := h.New(t)
	s2 := reopen(t, h, s1)
	q, key := uniq("rate-gone"), uniq("rate")
	setLimit(t, s1, key, store.RateLimit{MaxActive: 2})
	insert(t, s1, limitedJobs(q, key, keyed)...)
	for range free {
		insert(t, s1, job(q))
	}

	var deleted atomic.Bool
	_, claims := drainConcurrently(t, []store.Store{s1, s2}, q, keyed+free, func(done int64) error {
		if done >= keyed/3 && deleted.CompareAndSwap(false, true) {
			return limiter(t, s1).DeleteRateLimit(ctx(t), key)
		}
		return nil
	})
	require.True(t, deleted.Load(), "the limit was deleted mid-drain")
	require.Len(t, claims, keyed+free)
	for id, n := range claims {
		require.Equal(t, 1, n, "job %s ran once", id)
	}
	info, ok := queueInfo(t, s2, q)
	require.True(t, ok)
	require.Equal(t, int64(keyed+free), info.Counts[store.StateCompleted], "no job is left waiting")
}

// drainConcurrently runs six workers over stores (alternating) until total jobs of q have been
// claimed and completed, each worker claiming 1 to 5 at a time and holding them up to 2 ms. after,
// when not nil, is called with the number completed so far after each finish. It returns the most
// jobs the workers held at once and how many times each job was claimed.
func drainConcurrently(t *testing.T, stores []store.Store, q string, total int64, after func(done int64) error) (int64, map[string]int) {
	const workers = 6
	var (
		running, peak, done atomic.Int64
		mu                  sync.Mutex
		claims              = map[string]int{}
		wg                  sync.WaitGroup
		errs                = make(chan error, workers)
	)
	for w := range workers {
		st := stores[w%len(stores)]
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		workerID := fmt.Sprintf("limited-%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Minute)
			for done.Load() < total {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: jobs not drained in time", workerID)
					return
				}
				jobs, err := st.Claim(ctx(t), store.ClaimParams{Queue: q, Limit: 1 + rng.IntN(5), WorkerID: workerID, LeaseDuration: lease})
				if err != nil {
					errs <- fmt.Errorf("%s: claim: %w", workerID, err)
					return
				}
				if len(jobs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, j := range jobs {
					claims[j.ID]++
				}
				mu.Unlock()
				// running counts jobs from after their claim returned until before their finish is
				// sent, so it never exceeds the store's own count of active jobs.
				n := running.Add(int64(len(jobs)))
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				running.Add(-int64(len(jobs)))
				cs := make([]store.Completion, len(jobs))
				for i, j := range jobs {
					cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
				}
				if _, err := st.Finish(ctx(t), cs); err != nil {
					errs <- fmt.Errorf("%s: finish: %w", workerID, err)
					return
				}
				d := done.Add(int64(len(jobs)))
				if after != nil {
					if err := after(d); err != nil {
						errs <- fmt.Errorf("%s: %w", workerID, err)
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
	require.Equal(t, total, done.Load(), "every job ran")
	return peak.Load(), claims
}

// heldBackClaim claims with p, collecting what its OnHeldBack reports.
type heldBackClaim struct {
	calls                int
	dropped, rescheduled []*store.Job
}

func (h *heldBackClaim) claim(t *testing.T, s store.Store, p store.ClaimParams) []*store.Job {
	t.Helper()
	p.OnHeldBack = func(dropped, rescheduled []*store.Job) {
		h.calls++
		require.NotZero(t, len(dropped)+len(rescheduled), "OnHeldBack is called only with jobs")
		h.dropped = append(h.dropped, dropped...)
		h.rescheduled = append(h.rescheduled, rescheduled...)
	}
	jobs, err := s.Claim(ctx(t), p)
	require.NoError(t, err)
	return jobs
}

// testRateLimitHeldBackReported: a claim reports every job it drops or reschedules for its rate
// limit through ClaimParams.OnHeldBack, once, as the job now is; a claim that holds nothing back
// does not call it. Without the report, a dropped job vanishes unheard of (no event, no metric).
func testRateLimitHeldBackReported(t *testing.T, s store.Store) {
	q, key := uniq("rate-held-drop"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop})
	a, b, c := limitedJob(q, key), limitedJob(q, key), limitedJob(q, key)
	insert(t, s, a, b, c)
	var h heldBackClaim
	var claimed []*store.Job
	for range 3 {
		claimed = append(claimed, h.claim(t, s, store.ClaimParams{Queue: q, Limit: 10, WorkerID: worker, LeaseDuration: lease})...)
	}
	require.Equal(t, []string{a.ID}, ids(claimed))
	require.ElementsMatch(t, []string{b.ID, c.ID}, ids(h.dropped), "each dropped job is reported, once")
	require.Empty(t, h.rescheduled)
	for _, j := range h.dropped {
		require.Equal(t, store.StateDiscarded, j.State)
		require.Equal(t, key, j.RateKey)
		require.Equal(t, q, j.Queue)
		require.NotEmpty(t, j.Errors)
		require.Equal(t, "rate_limited", j.Errors[len(j.Errors)-1].Type)
		stored := get(t, s, j.ID)
		require.Equal(t, stored.State, j.State, "reported as it now is")
		require.True(t, stored.CompletedAt.Equal(j.CompletedAt), "reported as it now is")
	}

	// A claim for several workers (a coalesced remote fetch) reports what it reschedules.
	rq, rkey := uniq("rate-held-resched"), uniq("rate")
	setLimit(t, s, rkey, store.RateLimit{MaxActive: 1, OnLimit: store.LimitReschedule})
	d, e := limitedJob(rq, rkey), limitedJob(rq, rkey)
	insert(t, s, d, e)
	var hr heldBackClaim
	claimed = nil
	for range 2 {
		claimed = append(claimed, hr.claim(t, s, store.ClaimParams{Queue: rq, WorkerIDs: []string{"w1", "w2"}, LeaseDuration: lease})...)
	}
	require.Equal(t, []string{d.ID}, ids(claimed))
	require.Empty(t, hr.dropped)
	require.Equal(t, []string{e.ID}, ids(hr.rescheduled))
	stored := get(t, s, e.ID)
	require.Equal(t, store.StateScheduled, hr.rescheduled[0].State)
	require.Equal(t, store.StateScheduled, stored.State)
	require.True(t, stored.ScheduledAt.Equal(hr.rescheduled[0].ScheduledAt), "reported with its new due time")

	// Nothing held back: no call.
	pq := uniq("rate-held-none")
	insert(t, s, job(pq))
	var hn heldBackClaim
	require.Len(t, hn.claim(t, s, store.ClaimParams{Queue: pq, Limit: 10, WorkerID: worker, LeaseDuration: lease}), 1)
	require.Empty(t, hn.claim(t, s, store.ClaimParams{Queue: q, Limit: 10, WorkerID: worker, LeaseDuration: lease}))
	require.Zero(t, hn.calls, "a claim that holds nothing back does not call OnHeldBack")
}

// limitedClaimHits claims with p, collecting what its OnLimited reports.
type limitedClaimHits struct {
	calls int
	hits  []store.LimitHit
}

func (h *limitedClaimHits) claim(t *testing.T, s store.Store, p store.ClaimParams) []*store.Job {
	t.Helper()
	p.OnLimited = func(hits []store.LimitHit) {
		h.calls++
		require.NotEmpty(t, hits, "OnLimited is called only with keys")
		seen := map[string]bool{}
		for _, x := range hits {
			require.False(t, seen[x.Key], "a key is named once per call")
			seen[x.Key] = true
		}
		h.hits = append(h.hits, hits...)
	}
	jobs, err := s.Claim(ctx(t), p)
	require.NoError(t, err)
	return jobs
}

// testRateLimitLimitedReported: a claim names, through ClaimParams.OnLimited, each rate key it
// passed a job over for, or leaves without room while a job of it waits, with the bound that stops
// it and its use, and with HasRoom a key it took jobs of that has room and jobs waiting (the events
// rate_limit.exceeded and rate_limit.released are built on it); a claim that met no rate-limited
// job, or one whose key's room ran out with no job of it left, does not call it.
func testRateLimitLimitedReported(t *testing.T, s store.Store) {
	claimP := func(q string) store.ClaimParams {
		return store.ClaimParams{Queue: q, Limit: 10, WorkerID: worker, LeaseDuration: lease}
	}
	// MaxActive: the first claim takes one job and passes the others over; so does the next, which
	// takes nothing (a store that holds the waiting jobs still names the key).
	q, key := uniq("rate-limited-conc"), uniq("rate")
	setLimit(t, s, key, store.RateLimit{MaxActive: 1})
	insert(t, s, limitedJobs(q, key, 3)...)
	var h limitedClaimHits
	require.Len(t, h.claim(t, s, claimP(q)), 1)
	require.Equal(t, 1, h.calls)
	require.Equal(t, []store.LimitHit{{Key: key, Strategy: store.LimitConcurrency, Limit: 1, Current: 1}}, h.hits)
	h = limitedClaimHits{}
	require.Empty(t, h.claim(t, s, claimP(q)))
	require.Equal(t, []store.LimitHit{{Key: key, Strategy: store.LimitConcurrency, Limit: 1, Current: 1}}, h.hits,
		"a claim that takes nothing for want of room names the key too")

	// A claim that fills up with the key's last room names the key too while more of its jobs wait:
	// the key stays limited from one claim to the next as long as its backlog lasts.
	fq, fkey := uniq("rate-limited-full"), uniq("rate")
	setLimit(t, s, fkey, store.RateLimit{MaxActive: 1})
	insert(t, s, limitedJobs(fq, fkey, 2)...)
	h = limitedClaimHits{}
	one := claimP(fq)
	one.Limit = 1
	require.Len(t, h.claim(t, s, one), 1)
	require.Equal(t, []store.LimitHit{{Key: fkey, Strategy: store.LimitConcurrency, Limit: 1, Current: 1}}, h.hits)

	// A claim that takes fewer of a key's jobs than its room allows, more of them waiting, names the
	// key with HasRoom: its backlog is not gone.
	bq, bkey := uniq("rate-limited-backlog"), uniq("rate")
	setLimit(t, s, bkey, store.RateLimit{MaxActive: 3})
	insert(t, s, limitedJobs(bq, bkey, 3)...)
	h = limitedClaimHits{}
	one = claimP(bq)
	one.Limit = 1
	require.Len(t, h.claim(t, s, one), 1)
	require.Equal(t, []store.LimitHit{{Key: bkey, HasRoom: true}}, h.hits)

	// Rate per Period: the window's starts.
	rq, rkey := uniq("rate-limited-window"), uniq("rate")
	setLimit(t, s, rkey, store.RateLimit{Rate: 2, Period: time.Hour})
	insert(t, s, limitedJobs(rq, rkey, 3)...)
	h = limitedClaimHits{}
	require.Len(t, h.claim(t, s, claimP(rq)), 2)
	require.Equal(t, []store.LimitHit{{Key: rkey, Strategy: store.LimitRate, Limit: 2, Current: 2}}, h.hits)

	// A key dropping its jobs was hit too (OnHeldBack reports the jobs, OnLimited the key).
	dq, dkey := uniq("rate-limited-drop"), uniq("rate")
	setLimit(t, s, dkey, store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop})
	insert(t, s, limitedJobs(dq, dkey, 2)...)
	h = limitedClaimHits{}
	require.Len(t, h.claim(t, s, claimP(dq)), 1)
	require.Equal(t, []store.LimitHit{{Key: dkey, Strategy: store.LimitConcurrency, Limit: 1, Current: 1}}, h.hits)

	// Room used up exactly, nothing left waiting: no call. Nor for a queue without limited jobs.
	eq, ekey := uniq("rate-limited-exact"), uniq("rate")
	setLimit(t, s, ekey, store.RateLimit{MaxActive: 2})
	insert(t, s, limitedJobs(eq, ekey, 2)...)
	pq := uniq("rate-limited-none")
	insert(t, s, job(pq))
	h = limitedClaimHits{}
	require.Len(t, h.claim(t, s, claimP(eq)), 2)
	require.Len(t, h.claim(t, s, claimP(pq)), 1)
	require.Zero(t, h.calls, "no key passed a job over")
}

// laterLimitedJobs returns n jobs of queue and rate key key ("" for none) at priority, scheduled
// an hour and more from now.
func laterLimitedJobs(queue, key string, priority, n int) []*store.InsertParams {
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		p := limitedJob(queue, key)
		p.Priority = priority
		p.State = store.StateScheduled
		p.ScheduledAt = time.Now().Add(time.Hour + time.Duration(i)*time.Millisecond)
		ps[i] = p
	}
	return ps
}

func testRateLimitBesideLaterJobs(t *testing.T, s store.Store) {
	// A rate-limited queue whose keys hold jobs due later, above and below their jobs due now: key
	// k has room, key d is at its limit and drops what it holds back, key u has no limit. A claim
	// takes exactly the jobs due now that may start, in claim order, drops only d's jobs due now,
	// and leaves every job due later where it was.
	q, k, d, u := uniq("rate-later"), uniq("rate"), uniq("rate"), uniq("rate")
	setLimit(t, s, k, store.RateLimit{MaxActive: 100})
	setLimit(t, s, d, store.RateLimit{MaxActive: 1, OnLimit: store.LimitDrop})
	running := limitedJob(q, d)
	running.Priority = 9
	insert(t, s, running)
	require.Equal(t, []string{running.ID}, ids(claim(t, s, q, 1)), "d's running job")

	var later []*store.InsertParams
	later = append(later, laterLimitedJobs(q, k, 5, 20)...)
	later = append(later, laterLimitedJobs(q, d, 5, 20)...)
	later = append(later, laterLimitedJobs(q, d, 0, 10)...)
	later = append(later, laterLimitedJobs(q, "", 5, 10)...)
	later = append(later, laterLimitedJobs(q, u, 3, 5)...)
	insert(t, s, later...)
	dueOf := func(key string, priority int) *store.InsertParams {
		p := limitedJob(q, key)
		p.Priority = priority
		return p
	}
	kDue, plainDue, uDue := dueOf(k, 0), dueOf("", 1), dueOf(u, 2)
	dropped := []*store.InsertParams{dueOf(d, 7), dueOf(d, 0)}
	insert(t, s, kDue, plainDue, uDue)
	insert(t, s, dropped...)

	jobs := claim(t, s, q, 10)
	require.Equal(t, []string{uDue.ID, plainDue.ID, kDue.ID}, ids(jobs), "the jobs due now that may start, in claim order")
	for _, j := range jobs {
		require.Equal(t, store.StateActive, j.State)
	}
	for _, p := range dropped {
		require.Equal(t, store.StateDiscarded, get(t, s, p.ID).State, "d is at its limit and drops its jobs due now")
	}
	require.Empty(t, claim(t, s, q, 10), "nothing else is due")
	for _, p := range later {
		require.Equal(t, store.StateScheduled, get(t, s, p.ID).State, "a job due later stays scheduled")
	}
}
