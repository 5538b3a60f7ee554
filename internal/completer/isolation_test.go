package completer

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// sqlStateError is a database error with a SQLSTATE, as pgx's are.
type sqlStateError string

func (e sqlStateError) Error() string    { return "ERROR: something (SQLSTATE " + string(e) + ")" }
func (e sqlStateError) SQLState() string { return string(e) }

// lockTimeout is PostgreSQL's lock_not_available: a row lock held past lock_timeout.
const lockTimeout = sqlStateError("55P03")

// rowStore is a fake store whose Finish fails, with err, every call that holds a locked job, and
// applies everything else once. It records every call's ids.
type rowStore struct {
	mu      sync.Mutex
	err     error
	locked  map[string]bool
	hold    chan struct{} // if set, the first call waits for it, so that a batch gathers
	calls   [][]string
	applied map[string]int
}

func newRowStore(err error, locked ...string) *rowStore {
	s := &rowStore{err: err, locked: map[string]bool{}, applied: map[string]int{}}
	for _, id := range locked {
		s.locked[id] = true
	}
	return s
}

func (s *rowStore) finish(_ context.Context, cs []store.Completion) ([]store.FinishResult, error) {
	s.mu.Lock()
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(cs))
	for i := range cs {
		ids[i] = cs[i].ID
	}
	s.calls = append(s.calls, ids)
	for _, id := range ids {
		if s.locked[id] {
			return nil, fmt.Errorf("finish %d jobs: %w", len(cs), s.err)
		}
	}
	out := make([]store.FinishResult, len(cs))
	for i, id := range ids {
		s.applied[id]++
		out[i] = store.FinishResult{ID: id, Applied: s.applied[id] == 1}
	}
	return out, nil
}

func (s *rowStore) unlock(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locked, id)
}

func (s *rowStore) callsWith(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if slices.Contains(c, id) {
			n++
		}
	}
	return n
}

func (s *rowStore) written(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[id]
}

// fates records what each outcome's callback was told, and how often.
type fates struct {
	mu  sync.Mutex
	got map[string][]string
}

func newFates() *fates { return &fates{got: map[string][]string{}} }

func (f *fates) add(c *Completer, id string) {
	c.Add(Item{Completion: store.Completion{ID: id}, Done: func(applied bool, err error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.got[id] = append(f.got[id], fmt.Sprintf("applied=%v err=%v", applied, err))
	}})
}

// told returns what id's callback was told.
func (f *fates) told(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got[id])
}

func (f *fates) requireApplied(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(f.told(id)) > 0 }, 10*time.Second, time.Millisecond, "%s was never reported", id)
	require.Equal(t, []string{"applied=true err=<nil>"}, f.told(id), "%s is reported applied, once", id)
}

// TestPersistentRowErrorHoldsNoOtherOutcome: one outcome of a batch keeps failing with an error
// that is neither an outage nor a refusal (its row locked past lock_timeout). The batch is split:
// every other outcome of it is written at once, the failing one is set aside and tried on its own,
// and outcomes added later are written while it still fails. Once the lock is gone it is written,
// and every callback is told once. The whole batch used to be retried until the lock went, and
// every later outcome of the client waited behind it.
func TestPersistentRowErrorHoldsNoOtherOutcome(t *testing.T) {
	s := newRowStore(lockTimeout, "stuck")
	hold := make(chan struct{})
	s.hold = hold
	c := New(Config{MaxBatchSize: 100, Finish: s.finish, Transient: func(error) bool { return true }})
	run(t, c)
	f := newFates()
	f.add(c, "lead")
	require.Eventually(t, func() bool { return c.Backlog() == 0 }, 10*time.Second, time.Millisecond)
	for i := range 40 {
		if i == 17 {
			f.add(c, "stuck")
			continue
		}
		f.add(c, fmt.Sprint(i))
	}
	close(hold)
	f.requireApplied(t, "lead")
	for i := range 40 {
		if i != 17 {
			f.requireApplied(t, fmt.Sprint(i))
		}
	}
	for i := range 10 {
		f.add(c, fmt.Sprint("later", i))
	}
	for i := range 10 {
		f.requireApplied(t, fmt.Sprint("later", i))
	}
	require.Eventually(t, func() bool { return s.callsWith("stuck") >= 8 }, 10*time.Second, time.Millisecond,
		"the failing outcome is tried again")
	require.Empty(t, f.told("stuck"), "the failing outcome is never given up")

	s.unlock("stuck")
	f.requireApplied(t, "stuck")
	c.Close()
	<-c.Done()
	require.Equal(t, 1, s.written("stuck"))
}

// TestOutageKeepsTheBatchWhole: while the store is down (Config.Unavailable), the batch is tried
// whole, never split, however long the outage lasts: each piece would only fail alike.
func TestOutageKeepsTheBatchWhole(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	s := newRowStore(down, "0", "1", "2", "3", "4", "5", "6", "7")
	hold := make(chan struct{})
	s.hold = hold
	c := New(Config{MaxBatchSize: 100, Finish: s.finish, Transient: func(error) bool { return true },
		Unavailable: func(err error) bool { return errors.Is(err, down) }})
	run(t, c)
	f := newFates()
	f.add(c, "lead")
	require.Eventually(t, func() bool { return c.Backlog() == 0 }, 10*time.Second, time.Millisecond)
	for i := range 8 {
		f.add(c, fmt.Sprint(i))
	}
	close(hold)
	require.Eventually(t, func() bool { return s.callsWith("0") >= isolateAfter+3 }, 10*time.Second, time.Millisecond)
	for _, id := range []string{"0", "1", "2", "3", "4", "5", "6", "7"} {
		s.unlock(id)
	}
	for i := range 8 {
		f.requireApplied(t, fmt.Sprint(i))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, call := range s.calls[1:] {
		require.Len(t, call, 8, "an outage never splits the batch: calls %v", s.calls)
	}
}

// TestGenericOutageKeepsTheBatchWhole: without Config.Unavailable, the errors store.IsUnavailable
// knows of any store (a closed store here) keep the batch whole too, while a lock timeout, which it
// also counts, is isolated (TestPersistentRowErrorHoldsNoOtherOutcome).
func TestGenericOutageKeepsTheBatchWhole(t *testing.T) {
	c := New(Config{})
	require.True(t, c.outage(fmt.Errorf("finish: %w", store.ErrClosed)))
	require.True(t, c.outage(sqlStateError("08006")), "connection failure")
	require.True(t, c.outage(sqlStateError("57P01")), "admin shutdown")
	require.False(t, c.outage(lockTimeout), "a lock timeout is one statement's")
	require.False(t, c.outage(sqlStateError("57014")), "a statement timeout is one statement's")
	require.False(t, c.outage(sqlStateError("40P01")), "a deadlock")
	c = New(Config{Unavailable: func(error) bool { return true }})
	require.False(t, c.outage(fmt.Errorf("finish: %w", lockTimeout)), "a lock timeout is one statement's, whatever the store says")
}

// TestEveryOutcomeFailingIsIsolatedAtBoundedCost: every outcome fails alike, not as an outage (a
// migration holds the jobs table past lock_timeout). An isolation pass spends a bounded number of
// calls, the side lane holds at most maxSetAside outcomes, and the rest is handed back, in order, to
// be retried whole; once the lock is gone every outcome is written, each callback told once.
func TestEveryOutcomeFailingIsIsolatedAtBoundedCost(t *testing.T) {
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}

	// One pass, on its own: the lane's retries held off, so that every call is the pass's.
	s := newRowStore(lockTimeout, ids...)
	c := New(Config{Finish: s.finish})
	c.laneBackoff = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	batch := make([]Item, n)
	cs := make([]store.Completion, n)
	for i, id := range ids {
		cs[i] = store.Completion{ID: id}
		batch[i] = Item{Completion: cs[i]}
	}
	kept, keptCs := c.isolate(ctx, batch, cs, lockTimeout)
	s.mu.Lock()
	calls := len(s.calls)
	s.mu.Unlock()
	budget := 2*bits.Len(n) + 2
	require.LessOrEqual(t, calls, budget+bits.Len(n)+1, "an isolation pass's failing calls are bounded")
	c.mu.Lock()
	var aside []string
	for _, li := range c.lane {
		aside = append(aside, li.it.Completion.ID)
	}
	c.mu.Unlock()
	require.NotEmpty(t, aside)
	require.LessOrEqual(t, len(aside), maxSetAside)
	require.Len(t, kept, n-len(aside), "what is not set aside is handed back")
	var back []string
	for i := range kept {
		require.Equal(t, kept[i].Completion.ID, keptCs[i].ID)
		back = append(back, keptCs[i].ID)
	}
	require.ElementsMatch(t, ids, append(back, aside...))
	require.True(t, slices.IsSortedFunc(keptCs, func(a, b store.Completion) int {
		return slices.Index(ids, a.ID) - slices.Index(ids, b.ID)
	}), "in order")
	cancel()
	c.laneWG.Wait()

	// And through Run, to the end.
	s = newRowStore(lockTimeout, ids...)
	hold := make(chan struct{})
	s.hold = hold
	c = New(Config{MaxBatchSize: 1000, Finish: s.finish, Transient: func(error) bool { return true }})
	run(t, c)
	f := newFates()
	f.add(c, "lead")
	require.Eventually(t, func() bool { return c.Backlog() == 0 }, 10*time.Second, time.Millisecond)
	for _, id := range ids {
		f.add(c, id)
	}
	close(hold)
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lane) > 0 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return s.callsWith(ids[n/2]) >= 6 }, 20*time.Second, time.Millisecond)
	c.mu.Lock()
	require.LessOrEqual(t, len(c.lane), maxSetAside)
	c.mu.Unlock()
	for _, id := range ids {
		s.unlock(id)
	}
	c.Close() // which tries the lane at once
	for _, id := range ids {
		f.requireApplied(t, id)
	}
	<-c.Done()
}

// TestCloseTriesTheSetAsideAtOnce: on Close, an outcome set aside is tried at once, not after its
// backoff, and Done waits for it to be written, as for the queue.
func TestCloseTriesTheSetAsideAtOnce(t *testing.T) {
	s := newRowStore(lockTimeout, "stuck")
	c := New(Config{Finish: s.finish})
	run(t, c)
	f := newFates()
	f.add(c, "stuck")
	require.Eventually(t, func() bool { return s.callsWith("stuck") >= isolateAfter+4 }, 10*time.Second, time.Millisecond)
	// The lane's backoff for it is 800 ms or more now.
	c.mu.Lock()
	require.Len(t, c.lane, 1)
	require.GreaterOrEqual(t, c.lane[0].backoff, 800*time.Millisecond)
	c.lane[0].backoff = time.Hour // the next retry would never come in time but for Close
	c.mu.Unlock()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return time.Until(c.lane[0].next) > time.Minute
	}, 10*time.Second, time.Millisecond)
	s.unlock("stuck")
	c.Close()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not try the outcome set aside at once")
	}
	f.requireApplied(t, "stuck")
}

// TestStopReportsTheSetAsideOnce: when Run's context ends with an outcome still set aside, it is
// reported not written, once, and Done waits for that.
func TestStopReportsTheSetAsideOnce(t *testing.T) {
	s := newRowStore(lockTimeout, "stuck")
	c := New(Config{Finish: s.finish})
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	f := newFates()
	f.add(c, "stuck")
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lane) == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, c.Backlog(), "an outcome set aside is part of the backlog")
	c.Close()
	cancel()
	<-c.Done()
	require.Equal(t, []string{"applied=false err=context canceled"}, f.told("stuck"))
	require.Zero(t, c.Backlog())
}

// TestSetAsideOutcomeRefusedIsGivenUp: an outcome set aside whose data the store then refuses is
// given up after refusedTries, as in a batch, told once.
func TestSetAsideOutcomeRefusedIsGivenUp(t *testing.T) {
	refused := sqlStateError("22003")
	s := newRowStore(lockTimeout, "stuck")
	c := New(Config{Finish: s.finish, Transient: func(err error) bool { return !errors.Is(err, refused) }})
	run(t, c)
	f := newFates()
	f.add(c, "stuck")
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lane) == 1 }, 10*time.Second, time.Millisecond)
	s.mu.Lock()
	s.err = refused
	s.mu.Unlock()
	require.Eventually(t, func() bool { return len(f.told("stuck")) > 0 }, 20*time.Second, time.Millisecond)
	require.Equal(t, []string{"applied=false err=finish 1 jobs: " + refused.Error()}, f.told("stuck"))
	c.Close()
	<-c.Done()
}

// TestPartialResultsAreNotSentAgainWhileIsolating: a store that writes a batch in several calls
// answers a half with a *store.FinishPartialError: the outcomes it knows are settled and never sent
// again, while the failing one is isolated and set aside; a partial answer for the outcome set aside
// that knows it settles it too.
func TestPartialResultsAreNotSentAgainWhileIsolating(t *testing.T) {
	var mu sync.Mutex
	sent, written := map[string]int{}, map[string]int{}
	locked := true
	hold := make(chan struct{})
	first := true
	finish := func(_ context.Context, cs []store.Completion) ([]store.FinishResult, error) {
		mu.Lock()
		if first {
			first = false
			mu.Unlock()
			<-hold
			mu.Lock()
		}
		defer mu.Unlock()
		res := make([]store.FinishResult, len(cs))
		known := make([]bool, len(cs))
		failed := false
		for i, c := range cs {
			sent[c.ID]++
			res[i].ID = c.ID
			if c.ID == "stuck" && locked {
				failed = true
				continue
			}
			written[c.ID]++
			res[i].Applied = written[c.ID] == 1 // a completion applies once
			known[i] = true
		}
		if failed {
			return nil, &store.FinishPartialError{Results: res, Known: known, Err: lockTimeout}
		}
		if cs[0].ID == "stuck" {
			// Written, and the announcement after it failed.
			return nil, &store.FinishPartialError{Results: res, Known: known, Err: errors.New("announce failed")}
		}
		return res, nil
	}
	c := New(Config{MaxBatchSize: 100, Finish: finish})
	run(t, c)
	f := newFates()
	f.add(c, "lead")
	require.Eventually(t, func() bool { return c.Backlog() == 0 }, 10*time.Second, time.Millisecond)
	for i := range 9 {
		f.add(c, fmt.Sprint(i))
	}
	f.add(c, "stuck")
	close(hold)
	for i := range 9 {
		f.requireApplied(t, fmt.Sprint(i))
	}
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.lane) == 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	locked = false
	mu.Unlock()
	f.requireApplied(t, "stuck")
	c.Close()
	<-c.Done()
	mu.Lock()
	defer mu.Unlock()
	for id, n := range sent {
		if id != "stuck" {
			require.Equal(t, 1, n, "%s was sent again after it was written", id)
		}
	}
	require.Equal(t, 1, written["stuck"], "the outcome set aside is written once")
}

// TestFullLaneKeepsTheRestInItsBatch: with the side lane full, a further failing outcome waits in
// its batch as before (the lane is bounded), and is written once it can be.
func TestFullLaneKeepsTheRestInItsBatch(t *testing.T) {
	ids := make([]string, maxSetAside+1)
	for i := range ids {
		ids[i] = fmt.Sprint("stuck", i)
	}
	s := newRowStore(lockTimeout, ids...)
	c := New(Config{Finish: s.finish})
	run(t, c)
	f := newFates()
	for _, id := range ids {
		f.add(c, id) // each alone: an idle client writes each outcome at once
		require.Eventually(t, func() bool { return s.callsWith(id) >= isolateAfter }, 10*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { return s.callsWith(ids[maxSetAside]) >= isolateAfter+3 }, 20*time.Second, time.Millisecond)
	c.mu.Lock()
	require.Len(t, c.lane, maxSetAside, "the lane is bounded")
	c.mu.Unlock()
	f.add(c, "next")
	tries := s.callsWith(ids[maxSetAside])
	require.Eventually(t, func() bool { return s.callsWith(ids[maxSetAside]) >= tries+2 }, 20*time.Second, time.Millisecond)
	require.Zero(t, s.callsWith("next"), "with the lane full, a failing outcome holds the queue again")
	require.Empty(t, f.told("next"))
	for _, id := range ids {
		s.unlock(id)
	}
	c.Close() // which tries the lane at once
	for _, id := range append(ids, "next") {
		f.requireApplied(t, id)
	}
	<-c.Done()
}
