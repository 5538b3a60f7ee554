package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// check verifies the store's internal bookkeeping against its jobs: every job is filed exactly where
// its state says, stale counters are exact, heaps are heaps, counts and the id list are right.
func (s *Store) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()

	live := map[*job]int{}
	countHeap := func(name string, h *jheap) {
		stale := 0
		for i := range h.items {
			e := &h.items[i]
			if e.live() {
				live[e.j]++
			} else {
				stale++
			}
			if i > 0 {
				require.False(t, e.less(&h.items[(i-1)/2]), "%s: heap order broken at %d", name, i)
			}
		}
		require.Equal(t, stale, h.stale, "%s: stale count", name)
	}
	counts := map[*queue][8]int64{}
	for _, q := range s.queues {
		for k, h := range q.ready {
			countHeap("ready "+q.name+"/"+k, h)
		}
		for k, byKey := range q.limited {
			for key, h := range byKey {
				countHeap("limited "+q.name+"/"+k+"/"+key, h)
				for i := range h.items {
					if e := &h.items[i]; e.live() {
						require.Equal(t, key, e.j.RateKey, "a limited heap holds only its key's jobs")
						require.Equal(t, k, e.j.Kind)
					}
				}
			}
		}
		for k, h := range q.ready {
			for i := range h.items {
				if e := &h.items[i]; e.live() {
					require.Empty(t, e.j.RateKey, "ready heap %s holds only jobs without a rate key", k)
				}
			}
		}
		if q.fair != nil {
			for name, n := range q.fair.byName {
				for k, h := range n.heaps {
					countHeap("tenant "+q.name+"/"+name+"/"+k, h)
				}
			}
		}
		countHeap("waiting "+q.name, &q.waiting)
		counts[q] = [8]int64{}
	}
	countHeap("leases", &s.leases)
	for i := range s.terminal {
		f := &s.terminal[i]
		stale := 0
		for k := f.head; k < len(f.items); k++ {
			e := &f.items[k]
			if e.live() {
				live[e.j]++
				if k > f.head {
					require.False(t, e.j.CompletedAt.Before(f.items[k-1].j.CompletedAt) && f.items[k-1].live(),
						"terminal fifo out of order")
				}
			} else {
				stale++
			}
		}
		require.Equal(t, stale, f.stale, "terminal %d: stale count", i)
	}
	expiryLive := map[*job]int{}
	stale := 0
	for i := range s.expiry.items {
		e := &s.expiry.items[i]
		if e.live() {
			expiryLive[e.j]++
		} else {
			stale++
		}
	}
	require.Equal(t, stale, s.expiry.stale, "expiry: stale count")

	for id, j := range s.jobs {
		require.Equal(t, id, j.ID)
		c := counts[j.q]
		c[stateIndex(j.State)]++
		counts[j.q] = c
		want := 1
		if j.State == store.StatePending || (j.State == store.StateAvailable && j.heap == nil) {
			want = 0
		}
		if j.State == store.StateAvailable && j.heap == nil {
			require.True(t, expired(j, time.Now()), "an available job outside the ready heaps has expired")
		}
		require.Equal(t, want, live[j], "job %s (%s) has %d live primary entries", id, j.State, live[j])
		wantExp := 0
		if !j.ExpiresAt.IsZero() && notStarted(j.State) {
			wantExp = 1
		}
		require.Equal(t, wantExp, expiryLive[j], "job %s (%s) expiry entries", id, j.State)
		_, found := slices.BinarySearch(s.ids, id)
		require.True(t, found, "job %s in the id list", id)
		if j.Tenant != "" {
			l := s.tenantIDs[j.Tenant]
			require.NotNil(t, l, "tenant %s has an id list", j.Tenant)
			_, found := slices.BinarySearch(l.ids, id)
			require.True(t, found, "job %s in its tenant's id list", id)
		}
	}
	tenantJobs := map[string]int{}
	for _, j := range s.jobs {
		if j.Tenant != "" {
			tenantJobs[j.Tenant]++
		}
	}
	for tenant, l := range s.tenantIDs {
		require.Equal(t, tenantJobs[tenant], l.live, "live ids of tenant %s", tenant)
		require.True(t, slices.IsSorted(l.ids), "tenant %s's ids sorted", tenant)
		require.Equal(t, len(l.ids), len(slices.Compact(slices.Clone(l.ids))), "no id listed twice for tenant %s", tenant)
	}
	for j := range live {
		require.Same(t, j, s.jobs[j.ID], "a live entry belongs to a stored job")
	}
	finished := 0
	for q, c := range counts {
		require.Equal(t, c, q.counts, "counts of queue %s", q.name)
		finished += int(c[stateIndex(store.StateCompleted)] + c[stateIndex(store.StateCancelled)] + c[stateIndex(store.StateDiscarded)])
	}
	if s.maxFinished > 0 {
		require.LessOrEqual(t, finished, s.maxFinished, "finished jobs kept within the bound")
	}
	s.checkFeatures(t)
	require.True(t, slices.IsSorted(s.ids))
	require.Equal(t, len(s.ids), len(slices.Compact(slices.Clone(s.ids))), "no id listed twice")
}

// checkFeatures verifies the bookkeeping of unique keys, rate keys and workflows; s.mu must be held.
func (s *Store) checkFeatures(t *testing.T) {
	t.Helper()
	require.Empty(t, s.decided, "every terminal workflow job's children were decided")
	now := time.Now()
	rateCounts := map[*rateKey][8]int64{}
	wfCounts := map[*workflow][8]int{}
	wfStored := map[*workflow]int{}
	for _, j := range s.jobs {
		if j.RateKey == "" {
			require.Nil(t, j.rk)
		} else {
			require.Same(t, s.rates[j.RateKey], j.rk, "job %s refers to its key's bookkeeping", j.ID)
			c := rateCounts[j.rk]
			c[stateIndex(j.State)]++
			rateCounts[j.rk] = c
		}
		if j.UniqueKey != "" && j.holds(now) && slices.Equal(j.UniqueStates, store.DefaultUniqueStates) {
			require.Same(t, j, s.unique[j.UniqueKey], "job %s holding key %s is the key's holder", j.ID, j.UniqueKey)
		}
		if j.WorkflowID == "" {
			require.Nil(t, j.node)
			continue
		}
		w := j.node.wf
		require.Same(t, s.workflows[j.WorkflowID], w, "job %s refers to its workflow", j.ID)
		wfStored[w]++
		if j.RunOn == "" {
			c := wfCounts[w]
			c[stateIndex(j.State)]++
			wfCounts[w] = c
		}
		if j.State == store.StatePending && len(j.node.parents) > 0 {
			require.Equal(t, outcomeWait, decide(j), "pending job %s has undecided parents", j.ID)
		}
	}
	for key, rk := range s.rates {
		require.Equal(t, key, rk.name)
		require.Equal(t, rateCounts[rk], rk.counts, "counts of rate key %s", key)
		require.True(t, rk.set || rk.used(), "rate key %s without a limit or jobs is dropped", key)
	}
	for key, j := range s.unique {
		require.Same(t, j, s.jobs[j.ID], "the holder of key %s is stored", key)
		require.Equal(t, key, j.UniqueKey)
	}
	for id, w := range s.workflows {
		require.Equal(t, id, w.id)
		require.Equal(t, wfStored[w], w.stored, "stored jobs of workflow %s", id)
		require.Positive(t, w.stored, "a workflow without jobs is dropped")
		require.Equal(t, wfCounts[w], w.counts, "member counts of workflow %s", id)
	}
}

// TestRandomOperationsKeepInvariants drives the store through many random operations, enough to
// compact every structure several times, checking its bookkeeping as it goes.
func TestRandomOperationsKeepInvariants(t *testing.T) {
	randomOperations(t, New(WithMaxFinished(0)))
}

// TestRandomOperationsKeepInvariantsBounded does the same with a bound of 40 finished jobs, so the
// bound deletes jobs of every kind (rate keys, unique keys, workflow members) all along.
func TestRandomOperationsKeepInvariantsBounded(t *testing.T) {
	s := New(WithMaxFinished(40))
	randomOperations(t, s)
	require.Positive(t, s.DroppedFinished(), "the bound deleted finished jobs")
}

// randomOperations drives s through many random operations, checking its bookkeeping as it goes.
func randomOperations(t *testing.T, s *Store) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	queues := []string{"a", "b", "c", "w"} // "w" is for the feature operations only
	kinds := []string{"k1", "k2"}
	var ids []string
	pick := func() string {
		if len(ids) == 0 || rng.IntN(50) == 0 {
			return uuidv7.New() // sometimes an unknown id
		}
		return ids[rng.IntN(len(ids))]
	}
	for step := range 6_000 {
		if rng.IntN(5) == 0 {
			ids = append(ids, featureOp(t, s, rng, queues, kinds, pick)...)
			if step%1000 == 0 {
				s.check(t)
			}
			continue
		}
		switch op := rng.IntN(100); {
		case op < 20:
			var ps []*store.InsertParams
			for range 1 + rng.IntN(20) {
				p := &store.InsertParams{ID: uuidv7.New(), Kind: kinds[rng.IntN(2)], Queue: queues[rng.IntN(3)],
					Args: json.RawMessage(`[1]`), Priority: rng.IntN(3), State: store.StateAvailable, MaxAttempts: 1 + rng.IntN(3)}
				switch rng.IntN(6) {
				case 0:
					p.State, p.ScheduledAt = store.StateScheduled, time.Now().Add(time.Duration(rng.IntN(20))*time.Millisecond)
				case 1:
					p.State = store.StatePending
				case 2:
					p.ExpiresAt = time.Now().Add(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
				if n := rng.IntN(4); n > 0 { // most jobs with one of three tenants (their id lists)
					p.Tenant = fmt.Sprintf("t%d", n)
				}
				ps = append(ps, p)
			}
			if rng.IntN(2) == 0 {
				slices.Reverse(ps)
			}
			_, err := s.Insert(ctx, ps)
			require.NoError(t, err)
			for _, p := range ps {
				ids = append(ids, p.ID)
			}
		case op < 40:
			var kk []string
			if rng.IntN(2) == 0 {
				kk = kinds[:1+rng.IntN(2)]
			}
			_, err := s.Claim(ctx, store.ClaimParams{Queue: queues[rng.IntN(3)], Kinds: kk, Limit: 1 + rng.IntN(10),
				WorkerID: fmt.Sprint("w", rng.IntN(2)), LeaseDuration: time.Duration(rng.IntN(30)) * time.Millisecond})
			require.NoError(t, err)
		case op < 60:
			var cs []store.Completion
			states := []store.State{store.StateCompleted, store.StateRetryable, store.StateScheduled,
				store.StateDiscarded, store.StateCancelled, store.StateAvailable}
			for range 1 + rng.IntN(10) {
				id := pick()
				attempt := 1
				if j, err := s.GetJob(ctx, id); err == nil {
					attempt = j.Attempt
				}
				cs = append(cs, store.Completion{ID: id, Attempt: attempt, State: states[rng.IntN(len(states))],
					ScheduledAt: time.Now().Add(time.Duration(rng.IntN(20)-5) * time.Millisecond), RefundAttempt: rng.IntN(2) == 0})
			}
			_, err := s.Finish(ctx, cs)
			require.NoError(t, err)
		case op < 66:
			_, err := s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: fmt.Sprint("w", rng.IntN(2)),
				IDs: []string{pick(), pick(), pick()}, LeaseDuration: time.Duration(rng.IntN(30)) * time.Millisecond})
			require.NoError(t, err)
		case op < 70:
			_, err := s.CancelJob(ctx, pick())
			_ = err // not found or refused are both fine here
		case op < 74:
			_, _ = s.RetryJob(ctx, pick())
		case op < 77:
			_, _ = s.ActivateJob(ctx, pick())
		case op < 80:
			_, _ = s.DeleteJob(ctx, pick())
		case op < 85:
			_, err := s.Rescue(ctx, store.RescueParams{Limit: 1 + rng.IntN(20)})
			require.NoError(t, err)
		case op < 89:
			_, err := s.Promote(ctx, 1+rng.IntN(20))
			require.NoError(t, err)
		case op < 92:
			_, err := s.DiscardExpired(ctx, 1+rng.IntN(20))
			require.NoError(t, err)
		case op < 95:
			cut := time.Now().Add(-time.Duration(rng.IntN(20)) * time.Millisecond)
			_, err := s.Cleanup(ctx, store.CleanupParams{CompletedBefore: cut, CancelledBefore: cut,
				DiscardedBefore: cut, Limit: 1 + rng.IntN(50)})
			require.NoError(t, err)
		case op < 97:
			_, _, err := s.NextDue(ctx, queues[rng.IntN(3)])
			require.NoError(t, err)
		default:
			q := queues[rng.IntN(3)]
			if rng.IntN(2) == 0 {
				require.NoError(t, s.PauseQueue(ctx, q))
			} else {
				require.NoError(t, s.ResumeQueue(ctx, q))
			}
		}
		if step%1000 == 0 {
			s.check(t)
		}
	}
	s.check(t)

	// Drain: everything claimable is claimed exactly once, in a consistent store.
	for _, q := range queues {
		require.NoError(t, s.ResumeQueue(ctx, q))
	}
	limits, err := s.ListRateLimits(ctx)
	require.NoError(t, err)
	for _, l := range limits {
		require.NoError(t, s.DeleteRateLimit(ctx, l.Key))
	}
	waiting, _, err := s.ListJobs(ctx, store.ListParams{States: []store.State{store.StateScheduled, store.StateRetryable}, Limit: 100_000})
	require.NoError(t, err)
	last := time.Now()
	for _, j := range waiting {
		if j.ScheduledAt.After(last) {
			last = j.ScheduledAt
		}
	}
	require.WithinDuration(t, time.Now(), last, 2*time.Second, "every scheduled time above is within a second or so")
	time.Sleep(time.Until(last) + 5*time.Millisecond)
	seen := map[string]bool{}
	for _, q := range queues {
		for {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 7, WorkerID: "drain", LeaseDuration: time.Hour})
			require.NoError(t, err)
			if len(jobs) == 0 {
				break
			}
			for _, j := range jobs {
				require.False(t, seen[j.ID], "job %s claimed twice", j.ID)
				seen[j.ID] = true
			}
		}
	}
	s.check(t)
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		require.Zero(t, q.Counts[store.StateScheduled]+q.Counts[store.StateRetryable],
			"queue %s: every scheduled and retryable job was due and claimed", q.Name)
	}
}

// TestCompactionUnderChurn makes each structure hold far more stale entries than live ones and
// checks that compaction keeps them bounded.
func TestCompactionUnderChurn(t *testing.T) {
	s := New()
	ctx := t.Context()
	var ps []*store.InsertParams
	for range 5000 {
		ps = append(ps, &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[]`),
			State: store.StateAvailable, MaxAttempts: 3, ExpiresAt: time.Now().Add(time.Hour)})
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 10)
	for range 1000 { // 10,000 heartbeats of 10 jobs: stale lease entries pile up, then compact
		_, err := s.Heartbeat(ctx, store.HeartbeatParams{WorkerID: "w", IDs: ids(jobs), LeaseDuration: time.Minute})
		require.NoError(t, err)
	}
	for _, p := range ps[10:4000] { // cancel most available jobs: stale ready and expiry entries
		_, err := s.CancelJob(ctx, p.ID)
		require.NoError(t, err)
	}
	for _, p := range ps[10:3000] { // retry then delete: stale terminal entries
		_, err := s.RetryJob(ctx, p.ID)
		require.NoError(t, err)
		_, err = s.DeleteJob(ctx, p.ID)
		require.NoError(t, err)
	}
	s.check(t)
	s.mu.Lock()
	require.Less(t, len(s.leases.items), 2100, "lease heap compacted")
	require.Less(t, len(s.q("q").ready["k"].items), 5000, "ready heap compacted")
	require.Less(t, len(s.expiry.items), 5000, "expiry heap compacted")
	require.Less(t, len(s.terminal[1].items)-s.terminal[1].head, 3500, "terminal fifo compacted")
	require.Less(t, len(s.ids), 5000, "id list compacted")
	s.mu.Unlock()

	rest, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 5000, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, rest, 1000, "the jobs never cancelled are all still claimable")
	s.check(t)
}

// featureOp makes one random use of unique keys, rate limits or workflows and returns the ids of the
// jobs it inserted.
func featureOp(t *testing.T, s *Store, rng *rand.Rand, queues, kinds []string, pick func() string) []string {
	ctx := t.Context()
	mk := func() *store.InsertParams {
		return &store.InsertParams{ID: uuidv7.New(), Kind: kinds[rng.IntN(len(kinds))], Queue: queues[rng.IntN(len(queues))],
			Args: json.RawMessage(`[1]`), Priority: rng.IntN(3), State: store.StateAvailable, MaxAttempts: 1 + rng.IntN(3)}
	}
	rateKeys := []string{"", "", "r1", "r2", "r3"}
	policies := []store.OnConflict{store.ConflictReject, store.ConflictIgnore, store.ConflictReplace, store.ConflictReplaceExceptSchedule}
	switch op := rng.IntN(100); {
	case op < 35: // unique and limited jobs
		var ps []*store.InsertParams
		for range 1 + rng.IntN(5) {
			p := mk()
			p.RateKey = rateKeys[rng.IntN(len(rateKeys))]
			if rng.IntN(2) == 0 {
				p.UniqueKey = fmt.Sprint("u", rng.IntN(8))
				p.OnConflict = policies[rng.IntN(len(policies))]
				if rng.IntN(4) == 0 {
					p.UniqueUntil = time.Now().Add(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
			}
			if rng.IntN(4) == 0 {
				p.State, p.ScheduledAt = store.StateScheduled, time.Now().Add(time.Duration(rng.IntN(20))*time.Millisecond)
			}
			ps = append(ps, p)
		}
		if _, err := s.Insert(ctx, ps); err != nil {
			require.ErrorIs(t, err, store.ErrUniqueConflict)
			return nil
		}
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.ID
		}
		return out
	case op < 50: // a random graph
		wf := uuidv7.New()
		var ps []*store.InsertParams
		for i := range 2 + rng.IntN(5) {
			p := mk()
			p.Queue = "w"
			p.WorkflowID = wf
			p.RateKey = rateKeys[rng.IntN(len(rateKeys))]
			if i > 0 && rng.IntN(4) > 0 {
				for _, parent := range ps {
					if rng.IntN(2) == 0 {
						p.ParentIDs = append(p.ParentIDs, parent.ID)
					}
				}
			}
			if len(p.ParentIDs) > 0 {
				p.State = store.StatePending
				if i > 1 && rng.IntN(3) == 0 {
					p.RunOn = []store.RunOn{store.RunOnSuccess, store.RunOnFailure, store.RunOnComplete}[rng.IntN(3)]
				}
			}
			ps = append(ps, p)
		}
		_, _, err := s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Jobs: ps})
		require.NoError(t, err)
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.ID
		}
		return out
	case op < 62: // run what a claim returns to a random end, so graphs and limits move
		q := "w"
		if rng.IntN(3) == 0 {
			q = queues[rng.IntN(len(queues))]
		}
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1 + rng.IntN(20),
			WorkerID: "runner", LeaseDuration: time.Minute})
		require.NoError(t, err)
		ends := []store.State{store.StateCompleted, store.StateCompleted, store.StateDiscarded, store.StateCancelled, store.StateRetryable}
		cs := make([]store.Completion, len(jobs))
		for i, j := range jobs {
			cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: ends[rng.IntN(len(ends))], Result: json.RawMessage(`1`)}
		}
		_, err = s.Finish(ctx, cs)
		require.NoError(t, err)
	case op < 70:
		if j, err := s.GetJob(ctx, pick()); err == nil && j.WorkflowID != "" {
			_, _, err := s.CancelWorkflow(ctx, j.WorkflowID)
			if !errors.Is(err, store.ErrWorkflowFinished) { // a finished workflow is refused
				require.NoError(t, err)
			}
		}
	case op < 85:
		key := rateKeys[2+rng.IntN(3)]
		l := store.RateLimit{MaxActive: rng.IntN(3), OnLimit: []store.LimitAction{"", store.LimitWait, store.LimitDrop, store.LimitReschedule}[rng.IntN(4)]}
		if rng.IntN(2) == 0 {
			l.Rate, l.Period = 1+rng.IntN(3), time.Duration(5+rng.IntN(10))*time.Millisecond
		}
		require.NoError(t, s.SetRateLimit(ctx, key, l))
	case op < 92:
		err := s.DeleteRateLimit(ctx, rateKeys[2+rng.IntN(3)])
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	default:
		_, err := s.ListRateLimits(ctx)
		require.NoError(t, err)
		for _, q := range queues {
			_, _, err := s.NextDue(ctx, q)
			require.NoError(t, err)
		}
	}
	return nil
}

func (s *Store) q(name string) *queue { return s.queues[name] }

func ids(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
