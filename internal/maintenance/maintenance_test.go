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
