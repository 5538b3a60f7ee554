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

// cancelOnClaim is a real store whose first claim that returns jobs cancels the first of them
// through the store, and returns only once the client has heard the cancellation: the cancel lands
// between the claim and the run's start, the window a client cannot see through the store.
type cancelOnClaim struct {
	store.Store
	client    func() *pronto.Client
	once      sync.Once
	cancelled chan string
	err       error
}

func (s *cancelOnClaim) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	jobs, err := s.Store.Claim(ctx, p)
	if len(jobs) == 0 {
		return jobs, err
	}
	s.once.Do(func() {
		j := jobs[0]
		if _, s.err = s.Store.CancelJob(context.Background(), j.ID); s.err == nil {
			for deadline := time.Now().Add(30 * time.Second); !pronto.HeardCancel(s.client(), j.ID, j.ClaimToken); {
				if time.Now().After(deadline) {
					s.err = context.DeadlineExceeded
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		s.cancelled <- j.ID
	})
	return jobs, err
}

// TestCancelBetweenClaimAndStart: a job cancelled after a client claimed it and before the client
// registered its run never starts its worker (the cancellation names the run's claim token, and the
// client remembers it until the run arrives), and the client goes on working other jobs.
func TestCancelBetweenClaimAndStart(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		log := newRunLog()
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[echoArgs]) error {
			log.add(j.ID)
			return nil
		}))
		var c *pronto.Client
		s := &cancelOnClaim{Store: ts, client: func() *pronto.Client { return c }, cancelled: make(chan string, 1)}
		var err error
		c, err = pronto.NewClient(s, fastConfig(ws, defaultQueue(2)))
		require.NoError(t, err)
		startBuilt(t, c)

		first, err := c.Insert(context.Background(), echoArgs{Message: "cancelled"}, nil)
		require.NoError(t, err)
		var cancelled string
		select {
		case cancelled = <-s.cancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("no job was claimed")
		}
		require.NoError(t, s.err)
		require.Equal(t, first.ID, cancelled)
		second, err := c.Insert(context.Background(), echoArgs{Message: "runs"}, nil)
		require.NoError(t, err)
		waitState(t, c, second.ID, pronto.StateCompleted)
		require.Equal(t, pronto.StateCancelled, waitState(t, c, first.ID, pronto.StateCancelled).State)
		_, runs := log.snapshot()
		require.Zero(t, runs[first.ID], "the cancelled run never started")
		require.Equal(t, 1, runs[second.ID])
	})
}

// outcomeGate is a real store that holds the first outcome written (Finish) until released, and,
// while holdCancels is set, the cancel notifications its clients would hear, until deliverCancels:
// a cancel then lands after the worker returned and before its outcome is written, heard before or
// after the store refuses that outcome.
type outcomeGate struct {
	store.Store
	armed       atomic.Bool
	entered     chan struct{} // closed when the held Finish is entered
	release     chan struct{} // closed by the test: the held Finish goes on
	holdCancels atomic.Bool

	mu    sync.Mutex
	held  []func()
	inner store.Notifier
}

func newOutcomeGate(s store.Store) *outcomeGate {
	g := &outcomeGate{Store: s, entered: make(chan struct{}), release: make(chan struct{}), inner: s.Notifier()}
	g.armed.Store(true)
	return g
}

func (g *outcomeGate) Finish(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.Finish(ctx, cs)
}

func (g *outcomeGate) Notifier() store.Notifier { return g }

func (g *outcomeGate) Subscribe(fn func(store.Notification)) func() {
	return g.inner.Subscribe(func(n store.Notification) {
		if n.Kind == store.NotifyCancel && g.holdCancels.Load() {
			g.mu.Lock()
			g.held = append(g.held, func() { fn(n) })
			g.mu.Unlock()
			return
		}
		fn(n)
	})
}

func (g *outcomeGate) Signal(ctx context.Context, ns []store.Notification) error {
	return g.inner.Signal(ctx, ns)
}

// deliverCancels stops holding cancel notifications and delivers those held, once each arrived.
func (g *outcomeGate) deliverCancels(t *testing.T, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.held) >= want
	}, 10*time.Second, time.Millisecond, "the cancel notification never came")
	g.holdCancels.Store(false)
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// TestCancelAfterWorkerReturnedReportedOnce: a job cancelled after its worker returned and before
// the client wrote its outcome ends cancelled (the store refuses the outcome), and the client that
// ran it reports exactly one EventCancelled and no EventCompleted: heard first (JobCancel on that
// client, then its own notification too), or heard only after the refusal (a cancel from elsewhere,
// its notification late).
func TestCancelAfterWorkerReturnedReportedOnce(t *testing.T) {
	for _, order := range []string{"heard before the refusal", "heard after the refusal"} {
		t.Run(order, func(t *testing.T) {
			forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
				ctx := context.Background()
				gate := newOutcomeGate(ts.Store)
				ws := pronto.NewWorkers()
				pronto.AddWorker(ws, pronto.WorkFunc(func(context.Context, *pronto.Job[echoArgs]) error { return nil }))
				c, err := pronto.NewClient(gate, &pronto.Config{Workers: ws, Queues: defaultQueue(1)})
				require.NoError(t, err)
				events, unsub := c.Subscribe(pronto.EventCancelled, pronto.EventCompleted)
				defer unsub()
				startBuilt(t, c)
				released := false
				defer func() {
					if !released {
						close(gate.release)
					}
				}()
				row, err := c.Insert(ctx, echoArgs{Message: "cancelled late"}, nil)
				require.NoError(t, err)
				select {
				case <-gate.entered:
				case <-time.After(15 * time.Second):
					t.Fatal("the outcome was never written")
				}
				active, err := c.JobGet(ctx, row.ID)
				require.NoError(t, err)
				if order == "heard before the refusal" {
					_, err = c.JobCancel(ctx, row.ID)
					require.NoError(t, err)
					close(gate.release)
					released = true
				} else {
					gate.holdCancels.Store(true)
					_, err = ts.Store.CancelJob(ctx, row.ID) // as another process would
					require.NoError(t, err)
					close(gate.release)
					released = true
					require.Eventually(t, func() bool { return pronto.RefusedOutcome(c, row.ID, active.ClaimToken) },
						10*time.Second, time.Millisecond, "the outcome was not refused")
					gate.deliverCancels(t, 1)
				}
				var got []pronto.EventKind
				deadline := time.After(10 * time.Second)
				for len(got) == 0 {
					select {
					case ev := <-events:
						if ev.Job.ID == row.ID {
							got = append(got, ev.Kind)
						}
					case <-deadline:
						t.Fatal("no event for the job")
					}
				}
				// A second report would come at once: the cancel is heard twice in the first order.
				quiet := time.After(300 * time.Millisecond)
				for done := false; !done; {
					select {
					case ev := <-events:
						if ev.Job.ID == row.ID {
							got = append(got, ev.Kind)
						}
					case <-quiet:
						done = true
					}
				}
				require.Equal(t, []pronto.EventKind{pronto.EventCancelled}, got)
				j, err := c.JobGet(ctx, row.ID)
				require.NoError(t, err)
				require.Equal(t, pronto.StateCancelled, j.State)
			})
		})
	}
}
