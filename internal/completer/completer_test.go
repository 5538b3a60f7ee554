package completer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func TestBatchesAndReportsEveryOutcome(t *testing.T) {
	var mu sync.Mutex
	var batches []int
	release := make(chan struct{})
	first := true
	c := New(Config{MaxBatchSize: 50, MaxPending: 1000, Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		batches = append(batches, len(cs))
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-release // hold the first batch so the rest gather
		}
		out := make([]store.FinishResult, len(cs))
		for i, c := range cs {
			out[i] = store.FinishResult{ID: c.ID, Applied: c.ID != "stale"}
		}
		return out, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)

	var applied, notApplied atomic.Int32
	done := func(ok bool, err error) {
		require.NoError(t, err)
		if ok {
			applied.Add(1)
		} else {
			notApplied.Add(1)
		}
	}
	c.Add(Item{Completion: store.Completion{ID: "first"}, Done: done})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 }, 5*time.Second, time.Millisecond)
	for i := 0; i < 120; i++ {
		c.Add(Item{Completion: store.Completion{ID: fmt.Sprint(i)}, Done: done})
	}
	c.Add(Item{Completion: store.Completion{ID: "stale"}, Done: done})
	close(release)
	c.Close()
	<-c.Done()
	require.EqualValues(t, 121, applied.Load())
	require.EqualValues(t, 1, notApplied.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 50, 50, 21}, batches, "outcomes gathered while a batch was written go out together, bounded by MaxBatchSize")
}

func TestRetriesWhileTheStoreFails(t *testing.T) {
	var calls atomic.Int32
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		if calls.Add(1) < 3 {
			return nil, errors.New("database is down")
		}
		return []store.FinishResult{{ID: cs[0].ID, Applied: true}}, nil
	}})
	run(t, c)
	requireWritten(t, addOne(c, "a"), "the outcome is written once the store is back")
	require.EqualValues(t, 3, calls.Load())
	c.Close()
	<-c.Done()
}

// TestTemporaryErrorNeverGivesUpAnOutcome: an outcome alone in its batch that the store fails with
// an error Transient calls temporary (a lock timeout while a migration holds the table) is tried
// well past refusedTries and written once the error passes: only the outcome's own data is ever a
// reason to give it up, since a given-up outcome is a job that runs again.
func TestTemporaryErrorNeverGivesUpAnOutcome(t *testing.T) {
	lockTimeout := errors.New("canceling statement due to lock timeout (SQLSTATE 55P03)")
	refused := errors.New("value overflows numeric format (SQLSTATE 22003)")
	var calls atomic.Int32
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		if calls.Add(1) <= refusedTries+2 {
			return nil, lockTimeout
		}
		return []store.FinishResult{{ID: cs[0].ID, Applied: true}}, nil
	}, Transient: func(err error) bool { return !errors.Is(err, refused) }})
	run(t, c)
	requireWritten(t, addOne(c, "a"), "the outcome is written once the lock is gone")
	require.EqualValues(t, refusedTries+3, calls.Load())
	c.Close()
	<-c.Done()
}

func TestCancelledContextReportsWhatIsLeft(t *testing.T) {
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	errs := make(chan error, 2)
	c.Add(Item{Completion: store.Completion{ID: "a"}, Done: func(_ bool, err error) { errs <- err }})
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.Error(t, <-errs)
	<-c.Done()
	c.Add(Item{Completion: store.Completion{ID: "b"}, Done: func(_ bool, err error) { errs <- err }})
	require.Error(t, <-errs, "after the completer stopped, Add reports at once that nothing was written")
}

// TestAddWaitsForRoom: with MaxPending outcomes waiting behind a slow store, Add waits until a batch
// is taken, and Close releases an Add that is still waiting.
func TestAddWaitsForRoom(t *testing.T) {
	release := make(chan struct{})
	var written atomic.Int32
	c := New(Config{MaxBatchSize: 4, MaxPending: 4, Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		<-release
		written.Add(int32(len(cs)))
		out := make([]store.FinishResult, len(cs))
		for i, c := range cs {
			out[i] = store.FinishResult{ID: c.ID, Applied: true}
		}
		return out, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)

	// The first outcome is taken into a batch that the store holds; four more fill the queue.
	c.Add(Item{Completion: store.Completion{ID: "held"}})
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) == 0 }, 5*time.Second, time.Millisecond)
	for i := range 4 {
		c.Add(Item{Completion: store.Completion{ID: fmt.Sprint(i)}})
	}
	added := make(chan struct{})
	go func() {
		c.Add(Item{Completion: store.Completion{ID: "waits"}})
		close(added)
	}()
	waitForWaiter(t, c)
	select {
	case <-added:
		t.Fatal("Add returned while MaxPending outcomes were waiting")
	default:
	}
	close(release) // the store catches up: room opens and the waiting Add goes through
	select {
	case <-added:
	case <-time.After(5 * time.Second):
		t.Fatal("Add still waits after the store caught up")
	}
	c.Close()
	<-c.Done()
	require.EqualValues(t, 6, written.Load(), "every outcome is written")

}

// TestCloseWithAddsWaiting: an Add waiting for room when Close comes is still written by Run's final
// drain; one waiting when Run gives up (its context ends) is reported as not written.
func TestCloseWithAddsWaiting(t *testing.T) {
	release := make(chan struct{})
	var written atomic.Int32
	finish := func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		written.Add(int32(len(cs)))
		out := make([]store.FinishResult, len(cs))
		for i, c := range cs {
			out[i] = store.FinishResult{ID: c.ID, Applied: true}
		}
		return out, nil
	}
	fill := func(c *Completer) {
		c.Add(Item{Completion: store.Completion{ID: "held"}}) // taken into the batch the store holds
		require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) == 0 }, 5*time.Second, time.Millisecond)
		c.Add(Item{Completion: store.Completion{ID: "fills"}}) // MaxPending is 1: the queue is full
	}

	c := New(Config{MaxBatchSize: 1, MaxPending: 1, Finish: finish})
	go c.Run(context.Background())
	fill(c)
	got := make(chan error, 1)
	go c.Add(Item{Completion: store.Completion{ID: "waits"}, Done: func(applied bool, err error) {
		require.True(t, applied)
		got <- err
	}})
	waitForWaiter(t, c)
	c.Close()
	close(release)
	select {
	case err := <-got:
		require.NoError(t, err, "the waiting outcome is written by the final drain")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Add was not written")
	}
	<-c.Done()
	require.EqualValues(t, 3, written.Load())

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := New(Config{MaxBatchSize: 1, MaxPending: 1, Finish: finish})
	go gaveUp.Run(ctx)
	release = make(chan struct{}) // the store holds every batch now
	fill(gaveUp)
	go gaveUp.Add(Item{Completion: store.Completion{ID: "waits"}, Done: func(applied bool, err error) { got <- err }})
	waitForWaiter(t, gaveUp)
	cancel()
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled, "Run gave up: the waiting outcome is reported as not written")
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting Add outlived Run")
	}
	<-gaveUp.Done()
}

// waitForWaiter waits until an Add of c waits for room.
func waitForWaiter(t *testing.T, c *Completer) {
	t.Helper()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.waiters > 0 }, 5*time.Second, time.Millisecond)
}

func TestSpacingTellsAStreamFromLoneOutcomes(t *testing.T) {
	const linger = 5 * time.Millisecond
	s := newSpacing(linger)
	require.False(t, s.streaming(), "a new completer has seen no stream")
	at := time.Unix(1_700_000_000, 0)
	s.observe(at)
	for i := 0; i < 3; i++ {
		at = at.Add(2 * time.Millisecond)
		s.observe(at)
	}
	require.False(t, s.streaming(), "three outcomes are not yet a stream after an idle start")
	for i := 0; i < 20; i++ {
		at = at.Add(2 * time.Millisecond)
		s.observe(at)
	}
	require.True(t, s.streaming(), "outcomes 2 ms apart are a stream for a 5 ms linger")

	at = at.Add(time.Hour)
	s.observe(at)
	require.False(t, s.streaming(), "an idle spell ends a stream")
	require.LessOrEqual(t, s.est, 2*linger, "a long idle gap counts as at most twice the linger")
	for i := 0; i < 10; i++ {
		at = at.Add(20 * time.Millisecond)
		s.observe(at)
	}
	require.False(t, s.streaming(), "outcomes 20 ms apart are written one by one")
	for i := 0; i < 12; i++ {
		at = at.Add(time.Millisecond)
		s.observe(at)
	}
	require.True(t, s.streaming(), "a stream after an idle spell is recognised within a dozen outcomes")
}

// countingFinish records the size of every batch it is given and applies everything.
type countingFinish struct {
	mu      sync.Mutex
	batches []int
}

func (f *countingFinish) finish(_ context.Context, cs []store.Completion) ([]store.FinishResult, error) {
	f.mu.Lock()
	f.batches = append(f.batches, len(cs))
	f.mu.Unlock()
	out := make([]store.FinishResult, len(cs))
	for i, c := range cs {
		out[i] = store.FinishResult{ID: c.ID, Applied: true}
	}
	return out, nil
}

func (f *countingFinish) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches)
}

func TestLingersForCompanyWhileOutcomesStream(t *testing.T) {
	f := &countingFinish{}
	// A linger far longer than the outcomes' spacing, however slow the machine.
	c := New(Config{Finish: f.finish, Linger: 2 * time.Second})
	run(t, c)

	const n = 40
	var written atomic.Int32
	for i := 0; i < n; i++ {
		c.Add(Item{Completion: store.Completion{ID: fmt.Sprint(i)}, Done: func(ok bool, err error) {
			if ok && err == nil {
				written.Add(1)
			}
		}})
		time.Sleep(time.Millisecond)
	}
	require.Eventually(t, func() bool { return written.Load() == n }, 10*time.Second, time.Millisecond,
		"a linger ends after at most Linger")
	require.Less(t, f.calls(), n/2, "outcomes arriving in a stream share statements: batches %v", f.batches)
}

func TestWritesALoneOutcomeAtOnce(t *testing.T) {
	f := &countingFinish{}
	// Were the lone outcome to wait for the linger, it would take a minute.
	c := New(Config{Finish: f.finish, Linger: time.Minute})
	run(t, c)
	requireWritten(t, addOne(c, "a"), "a lone outcome is written without waiting for company")
}

func TestCloseEndsALinger(t *testing.T) {
	f := &countingFinish{}
	c := New(Config{Finish: f.finish, Linger: time.Minute})
	// Make the completer believe outcomes are streaming.
	at := time.Now()
	for i := 0; i < 50; i++ {
		c.gaps.observe(at.Add(time.Duration(i) * time.Millisecond))
	}
	run(t, c)
	got := addOne(c, "a")
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.lingering }, 10*time.Second, time.Millisecond)
	c.Close()
	requireWritten(t, got, "Close ends the linger and the outcome is written")
	<-c.Done()
}

// run runs c until the test ends.
func run(t *testing.T, c *Completer) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
}

// addOne queues one outcome; the channel tells whether it was written.
func addOne(c *Completer, id string) <-chan bool {
	got := make(chan bool, 1)
	c.Add(Item{Completion: store.Completion{ID: id}, Done: func(ok bool, err error) { got <- ok && err == nil }})
	return got
}

// requireWritten requires the outcome behind got to be written within 10 s.
func requireWritten(t *testing.T, got <-chan bool, what string) {
	t.Helper()
	select {
	case ok := <-got:
		require.True(t, ok, what)
	case <-time.After(10 * time.Second):
		t.Fatal("timed out: " + what)
	}
}

// TestRefusedOutcomeHoldsNoOther: the store refuses every batch holding one outcome (its data at
// fault: a non-transient error). The batch is split until that outcome is alone; the others are
// written, and it is given up after refusedTries, with the error. A transient error still retries
// the whole batch (TestRetriesWhileTheStoreFails). Such an outcome used to be retried with its
// batch for good, holding every outcome of the client.
func TestRefusedOutcomeHoldsNoOther(t *testing.T) {
	refused := errors.New("value overflows numeric format (SQLSTATE 22003)")
	var poisonTries atomic.Int32
	hold := make(chan struct{})
	first := true
	var mu sync.Mutex
	c := New(Config{MaxBatchSize: 100, Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-hold // gather the rest into one batch
		}
		out := make([]store.FinishResult, len(cs))
		for i, c := range cs {
			if c.ID == "poison" {
				if len(cs) == 1 {
					poisonTries.Add(1)
				}
				return nil, refused
			}
			out[i] = store.FinishResult{ID: c.ID, Applied: true}
		}
		return out, nil
	}, Transient: func(err error) bool { return !errors.Is(err, refused) }})
	run(t, c)
	c.Add(Item{Completion: store.Completion{ID: "lead"}})
	var applied atomic.Int32
	got := make(chan error, 1)
	for i := range 40 {
		id := fmt.Sprint(i)
		if i == 17 {
			id = "poison"
		}
		c.Add(Item{Completion: store.Completion{ID: id}, Done: func(ok bool, err error) {
			if id == "poison" {
				require.False(t, ok)
				got <- err
				return
			}
			require.NoError(t, err)
			if ok {
				applied.Add(1)
			}
		}})
	}
	close(hold)
	select {
	case err := <-got:
		require.ErrorIs(t, err, refused)
	case <-time.After(30 * time.Second):
		t.Fatal("the refused outcome was never given up")
	}
	require.Eventually(t, func() bool { return applied.Load() == 39 }, 10*time.Second, time.Millisecond, "every other outcome is written")
	require.EqualValues(t, refusedTries, poisonTries.Load())
	c.Close()
	<-c.Done()
}

// TestPartlyWrittenBatchSendsOnlyTheRest: a store that writes a batch in several calls (Redis: one
// per queue) fails after some outcomes are written, with a *store.FinishPartialError saying which.
// Those are settled as the store reported them and never sent again (sent again, they would be
// reported not applied, as a completion applies once); only the others are retried.
func TestPartlyWrittenBatchSendsOnlyTheRest(t *testing.T) {
	full := errors.New("OOM command not allowed when used memory > 'maxmemory'")
	var mu sync.Mutex
	written, sent := map[string]int{}, map[string]int{}
	hold := make(chan struct{})
	first := true
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			mu.Unlock()
			<-hold // gather the rest into one batch
			mu.Lock()
		}
		res := make([]store.FinishResult, len(cs))
		known := make([]bool, len(cs))
		failed := false
		for i, c := range cs {
			res[i].ID = c.ID
			sent[c.ID]++
			if c.ID[0] == 'b' && sent[c.ID] == 1 {
				failed = true // the second queue's call fails, the first time
				continue
			}
			written[c.ID]++
			res[i].Applied = written[c.ID] == 1 // a completion applies once
			known[i] = true
		}
		if failed {
			return nil, &store.FinishPartialError{Results: res, Known: known, Err: full}
		}
		return res, nil
	}, Transient: func(error) bool { return true }})
	run(t, c)
	c.Add(Item{Completion: store.Completion{ID: "lead"}})
	var got []<-chan bool
	for i := range 10 {
		got = append(got, addOne(c, fmt.Sprintf("a%d", i)), addOne(c, fmt.Sprintf("b%d", i)))
	}
	close(hold)
	for _, g := range got {
		requireWritten(t, g, "every outcome is reported applied")
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range written {
		require.Equal(t, 1, n, "%s is written once and not sent again", id)
	}
	require.Len(t, written, 21)
}

// TestWrittenBatchWithAnErrorIsNotSentAgain: a Finish whose outcomes are all known but which
// reports an error all the same (Redis: the announcement after the writes failed) settles every
// outcome and retries none.
func TestWrittenBatchWithAnErrorIsNotSentAgain(t *testing.T) {
	var calls atomic.Int32
	c := New(Config{Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		calls.Add(1)
		res := []store.FinishResult{{ID: cs[0].ID, Applied: true}}
		return nil, &store.FinishPartialError{Results: res, Known: []bool{true}, Err: errors.New("announcement failed")}
	}})
	run(t, c)
	requireWritten(t, addOne(c, "a"), "the outcome written is reported applied")
	c.Close()
	<-c.Done()
	require.EqualValues(t, 1, calls.Load())
}

// TestPromptOutcomeEndsALinger: an outcome marked Prompt (a rate-keyed job's, which frees room under
// its key's limit) ends a linger in progress, and the batch holding it is written at once, with the
// outcomes that were waiting for company.
func TestPromptOutcomeEndsALinger(t *testing.T) {
	f := &countingFinish{}
	// Were the batch to wait for the linger, it would take a minute.
	c := New(Config{Finish: f.finish, Linger: time.Minute})
	at := time.Now()
	for i := 0; i < 50; i++ {
		c.gaps.observe(at.Add(time.Duration(i) * time.Millisecond))
	}
	run(t, c)
	waiting := addOne(c, "a")
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.lingering }, 10*time.Second, time.Millisecond,
		"an ordinary outcome waits for company while outcomes stream")
	prompt := addPrompt(c, "p")
	requireWritten(t, waiting, "the prompt outcome ends the linger")
	requireWritten(t, prompt, "the prompt outcome is written with the batch")

	// A prompt outcome that arrives while outcomes stream and nothing lingers does not linger.
	c.mu.Lock()
	for i := 0; i < 50; i++ {
		c.gaps.observe(time.Now())
	}
	c.mu.Unlock()
	requireWritten(t, addPrompt(c, "q"), "a prompt outcome is written without waiting for company")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.False(t, c.prompt, "no prompt outcome is pending")
}

// addPrompt adds a Prompt outcome of job id and returns where its fate is told (true: written).
func addPrompt(c *Completer, id string) <-chan bool {
	got := make(chan bool, 1)
	c.Add(Item{Completion: store.Completion{ID: id}, Prompt: true, Done: func(ok bool, err error) { got <- ok && err == nil }})
	return got
}
