package maintenance

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestTakeOfficeRescuesAtOnce: a client that takes over from a dead leader rescues the jobs left on
// expired leases when it takes office, not at its next rescue tick (here an hour away), so a worker
// and leader dying together cost max(lease + rescue interval, TTL + TTL/3), not their sum.
func TestTakeOfficeRescuesAtOnce(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	if _, err := st.Insert(ctx, []*store.InsertParams{{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", Kind: "a.b",
		Queue: "default", Args: []byte(`[]`), MaxAttempts: 3, State: store.StateAvailable}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.Claim(ctx, store.ClaimParams{Queue: "default", Limit: 1, WorkerID: "dead", LeaseDuration: time.Millisecond})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	// The dead leader's office lapses in a moment; this client's first election is refused.
	if ok, err := st.Elect(ctx, LeaderName, "dead", 200*time.Millisecond); !ok || err != nil {
		t.Fatalf("elect the dead leader: %v %v", ok, err)
	}
	rescued := make(chan store.RescueResult, 1)
	m := New(Config{Store: st, ClientID: "survivor", LeaderTTL: 300 * time.Millisecond, RescueInterval: time.Hour,
		OnRescue: func(r store.RescueResult) { rescued <- r }})
	runCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-m.Done() }()
	go m.Run(runCtx)
	select {
	case r := <-rescued:
		if len(r.Requeued) != 1 {
			t.Fatalf("rescued %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the new leader did not rescue the expired job when it took office")
	}
	j, err := st.GetJob(ctx, claimed[0].ID)
	if err != nil || j.State != store.StateAvailable {
		t.Fatalf("job after takeover: %+v %v", j, err)
	}
}

// TestTasksRunOnTheLeaderOnly: of two maintainers on one store, only the leader runs the tasks, and
// Run returns only once its tasks have stopped.
func TestTasksRunOnTheLeaderOnly(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	var runs [2]atomic.Int64
	ms := make([]*Maintainer, 2)
	cancels := make([]context.CancelFunc, 2)
	for i := range ms {
		ms[i] = New(Config{Store: st, ClientID: fmt.Sprint("c", i), LeaderTTL: time.Minute,
			Tasks: []Task{{Name: "count", Interval: 10 * time.Millisecond, Run: func(context.Context) { runs[i].Add(1) }}}})
		var runCtx context.Context
		runCtx, cancels[i] = context.WithCancel(ctx)
		go ms[i].Run(runCtx)
	}
	deadline := time.Now().Add(30 * time.Second)
	for runs[0].Load()+runs[1].Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	leader := 0
	if ms[1].IsLeader() {
		leader = 1
	}
	if !ms[leader].IsLeader() || ms[1-leader].IsLeader() {
		t.Fatal("want exactly one leader")
	}
	if runs[leader].Load() < 5 || runs[1-leader].Load() != 0 {
		t.Fatalf("task runs: leader %d, other %d", runs[leader].Load(), runs[1-leader].Load())
	}
	for i := range ms {
		cancels[i]()
		<-ms[i].Done()
	}
	after := runs[leader].Load()
	time.Sleep(50 * time.Millisecond)
	if runs[leader].Load() != after {
		t.Fatal("the task ran after Run returned")
	}
}

// TestHeldHoldsPromotion: while Held reports true (maintenance mode) the leader's promotion passes
// leave a due scheduled job scheduled, yet still discard a job past its deadline; once Held reports
// false the next pass promotes it.
func TestHeldHoldsPromotion(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	past := time.Now().Add(-time.Second)
	due := &store.InsertParams{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e01", Kind: "a.b", Queue: "default", Args: []byte(`[]`),
		MaxAttempts: 3, State: store.StateScheduled, ScheduledAt: past}
	expired := &store.InsertParams{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e02", Kind: "a.b", Queue: "default", Args: []byte(`[]`),
		MaxAttempts: 3, State: store.StateAvailable, ExpiresAt: past}
	if _, err := st.Insert(ctx, []*store.InsertParams{due, expired}); err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	held.Store(true)
	var heldPasses atomic.Int64
	m := New(Config{Store: st, ClientID: "leader", PromoteInterval: 10 * time.Millisecond,
		Held: func(context.Context) bool { return held.Load() },
		OnPass: func(ctx context.Context, op string) (context.Context, func(int, error)) {
			return ctx, func(int, error) {
				if op == OpPromote && held.Load() {
					heldPasses.Add(1)
				}
			}
		}})
	runCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-m.Done() }()
	go m.Run(runCtx)

	state := func(id string) store.State {
		t.Helper()
		j, err := st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	waitFor(t, "three held promotion passes", func() bool { return heldPasses.Load() >= 3 })
	if s := state(due.ID); s != store.StateScheduled {
		t.Fatalf("due job under maintenance mode: %s, want scheduled", s)
	}
	if s := state(expired.ID); s != store.StateDiscarded {
		t.Fatalf("expired job under maintenance mode: %s, want discarded", s)
	}
	held.Store(false)
	waitFor(t, "the due job promoted after maintenance", func() bool { return state(due.ID) == store.StateAvailable })
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// onlyPruner hides every method of a store but the one-step PruneDiscarded: a store that cannot
// read its candidates first.
type onlyPruner struct{ store.DiscardedPruner }

// TestArchivePolicyNeverDeletesUnarchived: a pass whose policy is archive deletes nothing when
// the client has no archive or its store cannot prune in two steps, and holds back no other
// queue's pass.
func TestArchivePolicyNeverDeletesUnarchived(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	for i, q := range []string{"keep", "keep", "drop", "drop"} {
		p := &store.InsertParams{ID: fmt.Sprintf("019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e%02d", i), Kind: "a.b", Queue: q,
			Args: []byte(`[]`), MaxAttempts: 1, State: store.StateAvailable}
		if _, err := st.Insert(ctx, []*store.InsertParams{p}); err != nil {
			t.Fatal(err)
		}
		jobs, err := st.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		if _, err := st.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateDiscarded}}); err != nil {
			t.Fatal(err)
		}
	}
	queues := func(context.Context) (map[string]QueueRetention, error) {
		return map[string]QueueRetention{"keep": {MaxCount: 1, Archive: true}, "drop": {MaxCount: 1}}, nil
	}
	var archived atomic.Int64
	archive := func(_ context.Context, jobs []*store.Job) error { archived.Add(int64(len(jobs))); return nil }
	for _, tc := range []struct {
		name    string
		pruner  store.DiscardedPruner
		archive func(context.Context, []*store.Job) error
	}{
		{"no archive", st, nil},
		{"a store that prunes in one step", onlyPruner{st}, archive},
	} {
		m := New(Config{Store: st, ClientID: "leader", DeadLetterQueues: queues, Archive: tc.archive, BatchSize: 100})
		n, err := m.pruneDeadLetter(ctx, tc.pruner, store.PruneParams{Limit: 100}, time.Now())
		if err == nil {
			t.Fatalf("%s: no error for a queue to archive", tc.name)
		}
		if n > 1 {
			t.Fatalf("%s: %d deleted, want at most drop's 1", tc.name, n)
		}
	}
	if archived.Load() != 0 {
		t.Fatalf("archived %d through a store that cannot delete what it read", archived.Load())
	}
	page, _, err := st.ListJobs(ctx, store.ListParams{States: []store.State{store.StateDiscarded}, Queues: []string{"keep"}, Limit: 10})
	if err != nil || len(page) != 2 {
		t.Fatalf("keep's discarded jobs: %d (%v), want both", len(page), err)
	}
	page, _, err = st.ListJobs(ctx, store.ListParams{States: []store.State{store.StateDiscarded}, Queues: []string{"drop"}, Limit: 10})
	if err != nil || len(page) != 1 {
		t.Fatalf("drop's discarded jobs: %d (%v), want 1: its pass is not held back", len(page), err)
	}

	m := New(Config{Store: st, ClientID: "leader", DeadLetterQueues: queues, Archive: archive, BatchSize: 100})
	if _, err := m.pruneDeadLetter(ctx, st, store.PruneParams{Limit: 100}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if archived.Load() != 1 {
		t.Fatalf("archived %d, want keep's oldest", archived.Load())
	}
}

// electLostToCancel wins each election in the store, then loses the answer to its caller's
// cancellation, as a Stop landing while the election's statement runs does.
type electLostToCancel struct {
	store.Store
	elected chan struct{}
}

func (s *electLostToCancel) Elect(ctx context.Context, name, id string, ttl time.Duration) (bool, error) {
	ok, err := s.Store.Elect(context.Background(), name, id, ttl)
	if err != nil || !ok {
		return ok, err
	}
	s.elected <- struct{}{}
	<-ctx.Done()
	return false, ctx.Err()
}

// TestStopDuringElectionResigns: a maintainer stopped while its election runs does not know it
// won, yet the row is its own; it resigns all the same, so the next leader takes office at once
// instead of after the TTL. Before, it resigned only when it knew it led.
func TestStopDuringElectionResigns(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	st := &electLostToCancel{Store: mem, elected: make(chan struct{}, 1)}
	m := New(Config{Store: st, ClientID: "stopping", LeaderTTL: time.Hour})
	runCtx, cancel := context.WithCancel(ctx)
	go m.Run(runCtx)
	select {
	case <-st.elected:
	case <-time.After(30 * time.Second):
		t.Fatal("the maintainer never elected")
	}
	cancel()
	<-m.Done()
	if m.IsLeader() {
		t.Fatal("a stopped maintainer reports it leads")
	}
	ok, err := mem.Elect(ctx, LeaderName, "next", time.Hour)
	if err != nil || !ok {
		t.Fatalf("the next client could not take office (%v, %v): the stopped one kept the leadership", ok, err)
	}
}
