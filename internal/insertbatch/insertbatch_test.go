package insertbatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// gatedStore is a memory store whose Insert calls are recorded and can be held until released, so
// that a test can decide what gathers while a write is in flight. A held call ends with its context,
// as a real store's does.
type gatedStore struct {
	*memory.Store
	mu    sync.Mutex
	mixed bool                       // some Insert call held jobs of several queues
	sizes []int                      // batch size of each Insert call, in order
	ctxs  []context.Context          // context of each Insert call
	hold  chan struct{}              // while not nil, Insert waits for it to close
	in    chan []*store.InsertParams // each held call's params, sent when it starts waiting
}

func newGatedStore(t *testing.T) *gatedStore {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	return &gatedStore{Store: s, in: make(chan []*store.InsertParams, 100)}
}

func (g *gatedStore) Insert(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
	g.mu.Lock()
	for _, p := range ps {
		if p.Queue != ps[0].Queue {
			g.mixed = true
		}
	}
	g.sizes = append(g.sizes, len(ps))
	g.ctxs = append(g.ctxs, ctx)
	hold := g.hold
	g.mu.Unlock()
	if hold != nil {
		g.in <- ps
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Store.Insert(ctx, ps)
}

func (g *gatedStore) gate() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = make(chan struct{})
	return g.hold
}

func (g *gatedStore) ungate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = nil
}

func (g *gatedStore) calls() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

func job(n int) *store.InsertParams {
	return &store.InsertParams{
		ID: uuidv7.New(), Kind: "test.k", Queue: "default", Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)),
		State: store.StateAvailable, MaxAttempts: 3,
	}
}

func (b *Batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

type outcome struct {
	job *store.Job
	err error
}

// insertAsync runs b.Insert in a goroutine and returns where its outcome will arrive.
func insertAsync(ctx context.Context, b *Batcher, p *store.InsertParams) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		j, err := b.Insert(ctx, p)
		ch <- outcome{j, err}
	}()
	return ch
}

func TestLoneInsertIsWrittenAtOnceAlone(t *testing.T) {
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})
	for i := range 20 {
		p := job(i)
		j, err := b.Insert(context.Background(), p)
		require.NoError(t, err)
		require.Equal(t, p.ID, j.ID)
	}
	for _, n := range g.calls() {
		require.Equal(t, 1, n, "a sequential caller never waits for company")
	}
}

func TestInsertsGatherWhileAWriteIsInFlight(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1, MaxBatch: 7})
	release := g.gate()
	first := job(0)
	firstOut := insertAsync(ctx, b, first)
	<-g.in // the first write is in flight

	ps := make([]*store.InsertParams, 10)
	outs := make([]<-chan outcome, 10)
	for i := range ps {
		ps[i] = job(i + 1)
		outs[i] = insertAsync(ctx, b, ps[i])
	}
	require.Eventually(t, func() bool { return b.queued() == 10 }, 10*time.Second, time.Millisecond)
	g.ungate()
	close(release)

	o := <-firstOut
	require.NoError(t, o.err)
	require.Equal(t, first.ID, o.job.ID)
	for i, ch := range outs {
		o := <-ch
		require.NoError(t, o.err)
		require.Equal(t, ps[i].ID, o.job.ID, "each caller gets its own job")
		require.JSONEq(t, string(ps[i].Args), string(o.job.Args))
	}
	require.Equal(t, []int{1, 7, 3}, g.calls(), "the ten waiting jobs go in batches of at most MaxBatch")
}

func TestABatchHoldsOneQueue(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})
	release := g.gate()
	blocker := insertAsync(ctx, b, job(0))
	<-g.in
	var outs []<-chan outcome
	for i, q := range []string{"a", "b", "a", "b", "a"} {
		p := job(i + 1)
		p.Queue = q
		outs = append(outs, insertAsync(ctx, b, p))
		require.Eventually(t, func() bool { return b.queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	g.ungate()
	close(release)
	require.NoError(t, (<-blocker).err)
	for _, ch := range outs {
		require.NoError(t, (<-ch).err)
	}
	require.Equal(t, []int{1, 3, 2}, g.calls(), "queue a's three jobs, then queue b's two")
	require.False(t, g.mixed)
}

func TestABadJobFailsOnlyItsOwnCaller(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})

	existing := job(0)
	_, err := g.Store.Insert(ctx, []*store.InsertParams{existing})
	require.NoError(t, err)
	holder := job(1)
	holder.UniqueKey = "k"
	_, err = g.Store.Insert(ctx, []*store.InsertParams{holder})
	require.NoError(t, err)

	release := g.gate()
	blocker := insertAsync(ctx, b, job(2))
	<-g.in

	dupID := job(3)
	dupID.ID = existing.ID
	conflict := job(4)
	conflict.UniqueKey = "k"
	ignored := job(5)
	ignored.UniqueKey, ignored.OnConflict = "k", store.ConflictIgnore
	good := []*store.InsertParams{job(6), job(7), job(8)}

	// Handed over one after the other, so the batch's order (and so its halves) is known.
	queued := 0
	inOrder := func(p *store.InsertParams) <-chan outcome {
		ch := insertAsync(ctx, b, p)
		queued++
		require.Eventually(t, func() bool { return b.queued() == queued }, 10*time.Second, time.Millisecond)
		return ch
	}
	dupOut := inOrder(dupID)
	conflictOut := inOrder(conflict)
	ignoredOut := inOrder(ignored)
	var goodOuts []<-chan outcome
	for _, p := range good {
		goodOuts = append(goodOuts, inOrder(p))
	}
	g.ungate()
	close(release)

	require.NoError(t, (<-blocker).err)
	o := <-dupOut
	require.ErrorIs(t, o.err, store.ErrDuplicate)
	o = <-conflictOut
	var uc *store.UniqueConflictError
	require.ErrorAs(t, o.err, &uc)
	require.Equal(t, holder.ID, uc.ExistingID)
	o = <-ignoredOut
	require.NoError(t, o.err)
	require.True(t, o.job.Duplicate)
	require.Equal(t, holder.ID, o.job.ID)
	for i, ch := range goodOuts {
		o := <-ch
		require.NoError(t, o.err)
		require.Equal(t, good[i].ID, o.job.ID)
		got, err := g.Store.GetJob(ctx, good[i].ID)
		require.NoError(t, err)
		require.Equal(t, store.StateAvailable, got.State)
	}
	calls := g.calls()
	require.Equal(t, []int{1, 6, 3, 1, 2, 1, 1, 3}, calls, "the refused batch is written again in halves")
}

func TestCancelledCallerLeavesTheOthersAlone(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})
	release := g.gate()
	// A lone caller's write holds the one flight slot, so the next job gathers into a flight.
	blocker := insertAsync(ctx, b, job(0))
	<-g.in
	inFlightCtx, cancelInFlight := context.WithCancel(ctx)
	gone, stays := job(1), job(2)
	goneOut := make(chan outcome, 1)
	go func() {
		j, err := b.Insert(inFlightCtx, gone)
		goneOut <- outcome{j, err}
	}()
	require.Eventually(t, func() bool { return b.queued() == 1 }, 10*time.Second, time.Millisecond)
	second := g.gate()
	close(release) // the flight of the one caller who will give up starts and is held
	<-g.in
	require.NoError(t, (<-blocker).err)

	// A third write gathers the stayer and a waiter that gives up before it is taken.
	staysOut := insertAsync(ctx, b, stays)
	waitCtx, cancelWait := context.WithCancel(ctx)
	never := job(3)
	neverOut := make(chan outcome, 1)
	go func() {
		j, err := b.Insert(waitCtx, never)
		neverOut <- outcome{j, err}
	}()
	require.Eventually(t, func() bool { return b.queued() == 2 }, 10*time.Second, time.Millisecond)

	cancelWait()
	o := <-neverOut
	require.ErrorIs(t, o.err, context.Canceled)
	cancelInFlight()
	o = <-goneOut
	require.ErrorIs(t, o.err, context.Canceled)
	g.mu.Lock()
	flightCtx := g.ctxs[1]
	g.mu.Unlock()
	require.Error(t, flightCtx.Err(), "a flight whose every caller left is cancelled")
	require.NotEqual(t, inFlightCtx, flightCtx, "a flight writes under its own context")

	g.ungate()
	close(second)
	o = <-staysOut
	require.NoError(t, o.err)
	require.Equal(t, stays.ID, o.job.ID)
	_, err := g.Store.GetJob(ctx, never.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "a job given up before its write is never written")
	calls := g.calls()
	require.Equal(t, 1, calls[len(calls)-1], "only the stayer is in the last write")
}

// TestLoneCallerWritesItself: a caller alone writes its job itself, under its own context, so that
// its cancellation ends the write (a store's insert ends with its context), and what gathers
// meanwhile is written after it.
func TestLoneCallerWritesItself(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})
	release := g.gate()
	loneCtx, cancelLone := context.WithCancel(ctx)
	lone := job(0)
	loneOut := make(chan outcome, 1)
	go func() {
		j, err := b.Insert(loneCtx, lone)
		loneOut <- outcome{j, err}
	}()
	<-g.in
	g.mu.Lock()
	require.Equal(t, loneCtx, g.ctxs[0], "the lone caller's write runs under its context")
	g.mu.Unlock()
	later := insertAsync(ctx, b, job(1))
	require.Eventually(t, func() bool { return b.queued() == 1 }, 10*time.Second, time.Millisecond)
	g.ungate()
	cancelLone()
	require.ErrorIs(t, (<-loneOut).err, context.Canceled)
	_, err := g.Store.GetJob(ctx, lone.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the cancelled write stored nothing")
	close(release)
	require.NoError(t, (<-later).err, "the job that gathered meanwhile is written after it")
	require.Equal(t, []int{1, 1}, g.calls())
}

func TestFlightContextOutlivesOneCaller(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert, MaxFlights: 1})
	release := g.gate()
	blocker := insertAsync(ctx, b, job(0))
	<-g.in

	leaveCtx, leave := context.WithCancel(ctx)
	leaver, stayer := job(1), job(2)
	leaverOut := make(chan outcome, 1)
	go func() {
		j, err := b.Insert(leaveCtx, leaver)
		leaverOut <- outcome{j, err}
	}()
	stayerOut := insertAsync(ctx, b, stayer)
	require.Eventually(t, func() bool { return b.queued() == 2 }, 10*time.Second, time.Millisecond)
	second := g.gate()
	close(release) // the second write (leaver and stayer) starts and is held
	<-g.in
	leave()
	require.ErrorIs(t, (<-leaverOut).err, context.Canceled)
	g.mu.Lock()
	flightCtx := g.ctxs[1]
	g.mu.Unlock()
	require.NoError(t, flightCtx.Err(), "one caller leaving does not cancel the write of the others")
	g.ungate()
	close(second)
	require.NoError(t, (<-blocker).err)
	o := <-stayerOut
	require.NoError(t, o.err)
	require.Equal(t, stayer.ID, o.job.ID)
}

func TestManyConcurrentCallers(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	b := New(Config{Insert: g.Insert})
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := job(i)
			j, err := b.Insert(ctx, p)
			switch {
			case err != nil:
				errs <- err
			case j.ID != p.ID:
				errs <- fmt.Errorf("caller %d got job %s, inserted %s", i, j.ID, p.ID)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for _, s := range g.calls() {
		total += s
	}
	require.Equal(t, n, total)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.flights == 0 && len(b.queue) == 0
	}, 10*time.Second, time.Millisecond, "the writers end once the queue is empty")
}

func TestBatchFailingForAnotherReasonIsRetriedJobByJob(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore(t)
	var mu sync.Mutex
	var sizes []int
	// A store that cannot write more than one job at a time, with an error no single job causes.
	insert := func(ctx context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
		mu.Lock()
		sizes = append(sizes, len(ps))
		mu.Unlock()
		if len(ps) > 1 {
			return nil, errors.New("connection reset")
		}
		return g.Insert(ctx, ps)
	}
	b := New(Config{Insert: insert, MaxFlights: 1})
	release := g.gate()
	blocker := insertAsync(ctx, b, job(0))
	<-g.in
	ps := []*store.InsertParams{job(1), job(2), job(3)}
	var outs []<-chan outcome
	for _, p := range ps {
		outs = append(outs, insertAsync(ctx, b, p))
	}
	require.Eventually(t, func() bool { return b.queued() == 3 }, 10*time.Second, time.Millisecond)
	g.ungate()
	close(release)
	require.NoError(t, (<-blocker).err)
	for i, ch := range outs {
		o := <-ch
		require.NoError(t, o.err)
		require.Equal(t, ps[i].ID, o.job.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 3, 1, 1, 1}, sizes)
}

func TestStoreErrorReachesEveryCaller(t *testing.T) {
	boom := errors.New("database is down")
	b := New(Config{Insert: func(context.Context, []*store.InsertParams) ([]*store.Job, error) { return nil, boom }})
	_, err := b.Insert(context.Background(), job(0))
	require.ErrorIs(t, err, boom)
}

// BenchmarkHandOff measures what the batcher itself costs per insert, over a store write that does
// nothing: the hand-off to the writing goroutine and back, alone and from 100 goroutines.
func BenchmarkHandOff(b *testing.B) {
	noop := func(_ context.Context, ps []*store.InsertParams) ([]*store.Job, error) {
		out := make([]*store.Job, len(ps))
		for i, p := range ps {
			out[i] = &store.Job{ID: p.ID}
		}
		return out, nil
	}
	p := job(0)
	b.Run("sequential", func(b *testing.B) {
		bt := New(Config{Insert: noop})
		for b.Loop() {
			if _, err := bt.Insert(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		bt := New(Config{Insert: noop})
		b.SetParallelism(50)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := bt.Insert(context.Background(), p); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
