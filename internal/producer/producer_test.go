package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pronto-jobs/pronto/store"
)

// fakeQueue is a queue of n claimable jobs; claims take from it and record the limits asked for.
type fakeQueue struct {
	mu      sync.Mutex
	left    int
	limits  []int
	claimed atomic.Int64
	block   chan struct{} // when set, claims wait on it
}

func (q *fakeQueue) claim(ctx context.Context, limit int) ([]*store.Job, error) {
	if q.block != nil {
		<-q.block
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limits = append(q.limits, limit)
	n := min(limit, q.left)
	q.left -= n
	jobs := make([]*store.Job, n)
	for i := range jobs {
		jobs[i] = &store.Job{ID: "j"}
	}
	q.claimed.Add(int64(n))
	return jobs, nil
}

func (q *fakeQueue) add(n int) {
	q.mu.Lock()
	q.left += n
	q.mu.Unlock()
}

func (q *fakeQueue) claims() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.limits...)
}

func start(t *testing.T, cfg Config) (*Producer, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := New(cfg)
	go p.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-p.Done()
	})
	return p, cancel
}

func TestClaimsNoMoreThanFreeSlotsAndRefillsAsSlotsFree(t *testing.T) {
	q := &fakeQueue{left: 25}
	var mu sync.Mutex
	var held []func()
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 10, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { mu.Lock(); held = append(held, done); mu.Unlock() }})
	// Execute runs after the claim counts the job in flight: wait for every job to be handed over.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 10 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 10, p.InFlight())
	require.EqualValues(t, 10, q.claimed.Load(), "never more jobs than worker slots")
	// Free every slot: the backlog is claimed into them.
	mu.Lock()
	for _, d := range held {
		d()
	}
	held = nil
	mu.Unlock()
	require.Eventually(t, func() bool { return q.claimed.Load() == 20 }, 5*time.Second, time.Millisecond)
	for _, l := range q.claims() {
		require.LessOrEqual(t, l, 10)
	}
}

func TestWakeClaimsAtOnceAndIdleProducerDoesNotClaim(t *testing.T) {
	q := &fakeQueue{}
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 4, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	require.Eventually(t, func() bool { return len(q.claims()) == 1 }, 5*time.Second, time.Millisecond, "one claim at start")
	time.Sleep(50 * time.Millisecond)
	require.Len(t, q.claims(), 1, "an idle producer with no wake-up does not claim (no polling tick but the slow poll)")
	q.add(3)
	p.Wake()
	require.Eventually(t, func() bool { return q.claimed.Load() == 3 }, 5*time.Second, time.Millisecond)
}

func TestWakeUpsDuringAClaimCoalesce(t *testing.T) {
	q := &fakeQueue{block: make(chan struct{})}
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 4, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	// The start-up claim is blocked; pile up wake-ups meanwhile.
	for i := 0; i < 50; i++ {
		p.Wake()
	}
	close(q.block)
	require.Eventually(t, func() bool { return len(q.claims()) == 2 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Len(t, q.claims(), 2, "fifty wake-ups during one claim make exactly one follow-up claim")
}

func TestWakeAtClaimsWhenDue(t *testing.T) {
	q := &fakeQueue{}
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 4, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	require.Eventually(t, func() bool { return len(q.claims()) == 1 }, 5*time.Second, time.Millisecond)
	due := time.Now().Add(80 * time.Millisecond)
	q.add(1)
	p.WakeAt(due.Add(time.Hour)) // a later due time never delays an earlier one
	p.WakeAt(due)
	require.Eventually(t, func() bool { return q.claimed.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.False(t, time.Now().Before(due), "claimed no earlier than the due time")
}

func TestRunStopsWithItsContext(t *testing.T) {
	before := goleak.IgnoreCurrent()
	q := &fakeQueue{}
	ctx, cancel := context.WithCancel(context.Background())
	p := New(Config{Queue: "q", MaxWorkers: 1, Claim: q.claim, PollInterval: 10 * time.Millisecond,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	go p.Run(ctx)
	cancel()
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("producer did not stop")
	}
	goleak.VerifyNone(t, before)
}

func TestPromiseCountsFreeSlotsAndPromisesUntilAClaim(t *testing.T) {
	q := &fakeQueue{block: make(chan struct{})}
	var mu sync.Mutex
	var held []func()
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 3, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { mu.Lock(); held = append(held, done); mu.Unlock() }})
	// The start-up claim is blocked: promises count against the three slots meanwhile.
	require.True(t, p.Promise())
	require.True(t, p.Promise())
	require.True(t, p.Promise())
	require.False(t, p.Promise(), "three slots, three jobs promised: a fourth is left to others")
	q.add(3)
	close(q.block)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 3 }, 5*time.Second,
		time.Millisecond, "the promised jobs are claimed and running")
	require.False(t, p.Promise(), "every slot is running a job")
	mu.Lock()
	held[0]()
	held = held[1:]
	mu.Unlock()
	require.Eventually(t, p.Promise, 5*time.Second, time.Millisecond, "a freed slot takes a promise again")
	mu.Lock()
	for _, d := range held {
		d()
	}
	mu.Unlock()
}

// gatedQueue is a fakeQueue whose next claim, once armed, waits until released.
type gatedQueue struct {
	fakeQueue
	gmu     sync.Mutex
	gate    chan struct{} // armed: the next claim takes it and waits on it
	waiting chan int      // the limit of the claim that took the gate
}

func (q *gatedQueue) claim(ctx context.Context, limit int) ([]*store.Job, error) {
	q.gmu.Lock()
	gate := q.gate
	q.gate = nil
	q.gmu.Unlock()
	if gate != nil {
		q.waiting <- limit
		<-gate
	}
	return q.fakeQueue.claim(ctx, limit)
}

// arm sets the gate the next claim waits at, and returns what opens it (once; also when the test
// ends, failed or not, before the producer is stopped, since its claim waits there).
func (q *gatedQueue) arm(t *testing.T) (open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	q.gmu.Lock()
	q.gate = gate
	q.gmu.Unlock()
	return open
}

// heldJobs keeps the done funcs of the jobs handed to Execute, so a test frees slots when it chooses.
type heldJobs struct {
	mu  sync.Mutex
	fns []func()
}

func (h *heldJobs) add(done func()) {
	h.mu.Lock()
	h.fns = append(h.fns, done)
	h.mu.Unlock()
}

func (h *heldJobs) execute(_ *store.Job, _ time.Time, done func()) { h.add(done) }

func (h *heldJobs) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.fns)
}

// release ends the n jobs held longest.
func (h *heldJobs) release(n int) {
	h.mu.Lock()
	free := h.fns[:n]
	h.fns = append([]func(){}, h.fns[n:]...)
	h.mu.Unlock()
	for _, d := range free {
		d()
	}
}

func TestWakeDuringAClaimClaimsTheSlotsFreeBesideIt(t *testing.T) {
	q := &gatedQueue{fakeQueue: fakeQueue{left: 100}, waiting: make(chan int, 1)}
	var mu sync.Mutex
	var held heldJobs
	running, most := 0, 0
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 10, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			held.add(func() { mu.Lock(); running--; mu.Unlock(); done() })
		}})
	heldCount, release := held.count, held.release
	require.Eventually(t, func() bool { return heldCount() == 10 }, 5*time.Second, time.Millisecond)
	// Arm the gate, then free six slots: the Run loop's claim of them waits at the gate.
	openGate := q.arm(t)
	release(6)
	mainLimit := <-q.waiting
	require.Positive(t, mainLimit)
	// Three more slots free while that claim is in flight: a wake-up claims them beside it, and only
	// them (the Run loop's claim holds its own).
	release(3)
	before := len(q.claims())
	p.Wake()
	require.Eventually(t, func() bool { return len(q.claims()) > before }, 5*time.Second, time.Millisecond,
		"a side claim ran while the Run loop's claim was in flight")
	side := q.claims()[before]
	require.Equal(t, 10-1-mainLimit, side, "the side claim asks for the slots neither the claim in flight nor the running jobs hold")
	require.Eventually(t, func() bool { return heldCount() == 1+side }, 5*time.Second, time.Millisecond)
	openGate()
	require.Eventually(t, func() bool { return heldCount() == 10 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, most, 10, "never more jobs running than worker slots")
}

func TestConcurrentWakeUpsNeverOverfillTheSlots(t *testing.T) {
	const jobs, workers = 3000, 8
	q := &fakeQueue{left: jobs}
	var running, most atomic.Int64
	var finished atomic.Int64
	p, _ := start(t, Config{Queue: "q", MaxWorkers: workers, Claim: q.claim, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) {
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			go func() {
				time.Sleep(time.Duration(n) * 10 * time.Microsecond)
				running.Add(-1)
				finished.Add(1)
				done()
			}()
		}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					p.Wake()
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return finished.Load() == jobs }, 30*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()
	require.EqualValues(t, jobs, q.claimed.Load(), "every job claimed once")
	require.LessOrEqual(t, most.Load(), int64(workers), "never more jobs running than worker slots")
	require.Zero(t, p.InFlight())
}

func TestBacklogSlotsFreedDuringAClaimStartASideClaim(t *testing.T) {
	q := &gatedQueue{fakeQueue: fakeQueue{left: 100}, waiting: make(chan int, 1)}
	var held heldJobs
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 10, Claim: q.claim, PollInterval: time.Hour, Execute: held.execute})
	heldCount, release := held.count, held.release
	// The first claim filled every slot, so more jobs may wait (a backlog).
	require.Eventually(t, func() bool { return heldCount() == 10 }, 5*time.Second, time.Millisecond)
	openGate := q.arm(t)
	// Half the slots free: the Run loop claims them and waits at the gate.
	release(5)
	mainLimit := <-q.waiting
	require.Positive(t, mainLimit)
	before := len(q.claims())
	// The other jobs end while that claim is in flight: with no wake-up at all, their slots are
	// claimed beside it.
	release(heldCount())
	require.Eventually(t, func() bool { return len(q.claims()) > before }, 5*time.Second, time.Millisecond,
		"slots freed through a backlog during a claim start a side claim")
	require.Equal(t, 10-mainLimit, q.claims()[before], "the side claim takes the slots the claim in flight does not hold")
	require.Eventually(t, func() bool { return heldCount() == 10-mainLimit }, 5*time.Second, time.Millisecond)
	openGate()
	require.Eventually(t, func() bool { return heldCount() == 10 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 10, p.InFlight(), "never more jobs than worker slots")
}

// TestBacklogEndingShortAsksWhenDue: a claim that comes back short after full ones (a backlog that
// met a limit's rate window, say) asks the store when the queue is next due, and claims then, with
// no notification and no poll. Before, such a producer waited for its poll, and a window of 100 ms
// admitted one window's jobs a second.
func TestBacklogEndingShortAsksWhenDue(t *testing.T) {
	q := &fakeQueue{left: 15}
	var asked atomic.Int32
	nextDue := func(context.Context) (time.Time, bool, error) {
		if asked.Add(1) != 2 {
			return time.Time{}, false, nil // at start, and after the due claim: nothing due
		}
		// The window ends in 20 ms; its jobs are claimable then.
		q.add(5)
		return time.Now().Add(20 * time.Millisecond), true, nil
	}
	start(t, Config{Queue: "q", MaxWorkers: 10, Claim: q.claim, NextDue: nextDue, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	require.Eventually(t, func() bool { return q.claimed.Load() == 20 }, 5*time.Second, time.Millisecond,
		"the jobs due when the window ends are claimed then (claims %v, NextDue asked %d times)", q.claims(), asked.Load())
}

// TestShortClaimsDoNotAskWhenDue: claims that come back short without a backlog before them (a
// moderate rate: one job per claim) ask the store nothing more than the start did.
func TestShortClaimsDoNotAskWhenDue(t *testing.T) {
	q := &fakeQueue{}
	var asked atomic.Int32
	nextDue := func(context.Context) (time.Time, bool, error) {
		asked.Add(1)
		return time.Time{}, false, nil
	}
	p, _ := start(t, Config{Queue: "q", MaxWorkers: 10, Claim: q.claim, NextDue: nextDue, PollInterval: time.Hour,
		Execute: func(_ *store.Job, _ time.Time, done func()) { done() }})
	require.Eventually(t, func() bool { return len(q.claims()) == 1 }, 5*time.Second, time.Millisecond)
	for i := 1; i <= 20; i++ {
		q.add(1)
		p.Wake()
		require.Eventually(t, func() bool { return q.claimed.Load() == int64(i) }, 5*time.Second, time.Millisecond)
	}
	require.EqualValues(t, 1, asked.Load(), "NextDue asked at start only, not per short claim")
}
