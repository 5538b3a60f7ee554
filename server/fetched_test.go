package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// take returns and forgets the job with id, or nil.
func (f *fetchedJobs) take(id string) *pronto.JobRow {
	j := f.get(id)
	f.decided(j, nil)
	return j
}

func fetchedRow(id, worker string, lease time.Time) *pronto.JobRow {
	return &pronto.JobRow{ID: id, WorkerID: worker, LeaseExpiresAt: lease}
}

// TestFetchedJobsFull: a full table forgets expired jobs first, then the jobs whose lease ends
// first, so that newly fetched jobs are always remembered (workers that fetch and never ack once
// filled it for good, and every later outcome paid a read of its job).
func TestFetchedJobsFull(t *testing.T) {
	f := newFetchedJobs(100)
	now := time.Now()
	for i := range 100 {
		f.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("old", i), "w", now.Add(time.Hour+time.Duration(i)*time.Second))})
	}
	for i := range 30 {
		f.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("new", i), "w", now.Add(2*time.Hour))})
	}
	checkFetched(t, f)
	if len(f.jobs) != 100 || f.evicted != 30 {
		t.Fatalf("%d remembered, %d evicted; want 100 and 30", len(f.jobs), f.evicted)
	}
	for i := range 30 {
		if f.take(fmt.Sprint("old", i)) != nil {
			t.Fatalf("old%d, among the earliest leases, is still remembered", i)
		}
		if f.take(fmt.Sprint("new", i)) == nil {
			t.Fatalf("new%d was not remembered", i)
		}
	}
	if f.take("old30") == nil {
		t.Fatal("old30 was forgotten though 30 evictions were enough")
	}

	// Expired jobs go before any live one, whatever the order they came in.
	g := newFetchedJobs(10)
	for i := range 5 {
		g.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("live", i), "w", now.Add(time.Hour))})
		g.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("dead", i), "w", now.Add(-time.Second))})
	}
	g.add([]*pronto.JobRow{fetchedRow("next", "x", now.Add(time.Hour))})
	checkFetched(t, g)
	if len(g.jobs) != 6 || g.evicted != 0 || g.take("next") == nil || g.take("live4") == nil || g.take("dead0") != nil {
		t.Fatalf("after an add: %d remembered, %d live ones evicted; want the 5 expired forgotten and no live one", len(g.jobs), g.evicted)
	}
}

// TestFetchedJobsExtended: a heartbeat's extension moves a job's lease end, so a count-only
// heartbeat past the fetch's lease still finds it, and a full table evicts others before it.
func TestFetchedJobsExtended(t *testing.T) {
	f := newFetchedJobs(3)
	now := time.Now()
	f.add([]*pronto.JobRow{fetchedRow("a", "w", now.Add(-time.Millisecond)), fetchedRow("b", "w", now.Add(time.Minute))})
	if got := f.heldBy("w"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("heldBy before the extension = %v", got)
	}
	f.extended([]string{"a", "unknown"}, now.Add(time.Hour))
	checkFetched(t, f)
	got := f.heldBy("w")
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("heldBy after a's lease was extended = %v, want a and b", got)
	}
	f.add([]*pronto.JobRow{fetchedRow("c", "w", now.Add(2*time.Minute)), fetchedRow("d", "w", now.Add(3*time.Minute))})
	checkFetched(t, f)
	if f.take("b") != nil || f.take("a") == nil {
		t.Fatal("the full table evicted the extended job before the one whose lease ends first")
	}

	// lost forgets only the heartbeating worker's own jobs.
	f.add([]*pronto.JobRow{fetchedRow("e", "v", now.Add(time.Hour))})
	f.lost("w", []string{"c", "e"})
	checkFetched(t, f)
	if f.take("c") != nil || f.take("e") == nil {
		t.Fatal("lost(w) must forget w's job c and keep v's job e")
	}
}

// TestFetchedJobsConsistent: random adds, takes, extensions and losses keep the three indexes in
// step and the heap ordered.
func TestFetchedJobsConsistent(t *testing.T) {
	f := newFetchedJobs(50)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	id := func() string { return fmt.Sprint("j", rng.IntN(120)) }
	for range 5000 {
		switch rng.IntN(4) {
		case 0:
			w := fmt.Sprint("w", rng.IntN(5))
			f.add([]*pronto.JobRow{fetchedRow(id(), w, now.Add(time.Duration(rng.IntN(200)-20)*time.Second))})
		case 1:
			f.take(id())
		case 2:
			f.extended([]string{id(), id()}, now.Add(time.Duration(rng.IntN(200))*time.Second))
		case 3:
			f.lost(fmt.Sprint("w", rng.IntN(5)), []string{id()})
		}
		checkFetched(t, f)
	}
}

// checkFetched fails t unless f's map, heap and worker index hold the same jobs and the heap is
// ordered.
func checkFetched(t *testing.T, f *fetchedJobs) {
	t.Helper()
	if len(f.jobs) != len(f.byLease) || len(f.jobs) > f.max {
		t.Fatalf("%d jobs, %d in the heap, max %d", len(f.jobs), len(f.byLease), f.max)
	}
	inWorkers := 0
	for w, ids := range f.byWorker {
		for id := range ids {
			if e := f.jobs[id]; e == nil || e.job.WorkerID != w {
				t.Fatalf("worker index has %s under %s", id, w)
			}
			inWorkers++
		}
	}
	if inWorkers != len(f.jobs) {
		t.Fatalf("worker index holds %d jobs, the table %d", inWorkers, len(f.jobs))
	}
	for i, e := range f.byLease {
		if e.index != i || f.jobs[e.job.ID] != e {
			t.Fatalf("heap entry %d (%s) out of step", i, e.job.ID)
		}
		if i > 0 && e.leaseEnd.Before(f.byLease[(i-1)/2].leaseEnd) {
			t.Fatalf("heap entry %d ends before its parent", i)
		}
	}
}

// TestFetchedJobsHeldBy: a worker's live remembered jobs, without those taken, expired or another's;
// a job fetched again by another worker moves to it.
func TestFetchedJobsHeldBy(t *testing.T) {
	f := newFetchedJobs(10)
	live, past := time.Now().Add(time.Hour), time.Now().Add(-time.Second)
	f.add([]*pronto.JobRow{fetchedRow("a", "w1", live), fetchedRow("b", "w1", live), fetchedRow("c", "w1", past), fetchedRow("d", "w2", live)})
	got := f.heldBy("w1")
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("heldBy(w1) = %v", got)
	}
	if f.take("a") == nil || f.take("a") != nil {
		t.Fatal("take returns a job once")
	}
	f.add([]*pronto.JobRow{fetchedRow("b", "w2", live)})
	got = f.heldBy("w2")
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "d"}) || len(f.heldBy("w1")) != 0 {
		t.Fatalf("after b moved to w2: w2 %v, w1 %v", got, f.heldBy("w1"))
	}
	f.reset()
	if len(f.heldBy("w2")) != 0 || len(f.jobs) != 0 {
		t.Fatal("reset forgets everything")
	}
}

// TestFetchedJobsConcurrent: fetches, outcomes, heartbeats and count-only lookups from many
// goroutines at once (run with -race) leave the table consistent and within its bound.
func TestFetchedJobsConcurrent(t *testing.T) {
	f := newFetchedJobs(200)
	now := time.Now()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := fmt.Sprint("w", g%3)
			for i := range 2000 {
				id := fmt.Sprint("g", g, "-", i%300)
				switch i % 5 {
				case 0, 1:
					f.add([]*pronto.JobRow{fetchedRow(id, w, now.Add(time.Duration(i%50)*time.Second))})
				case 2:
					f.decided(f.get(id), nil)
				case 3:
					f.extended(f.heldBy(w), now.Add(time.Minute))
				case 4:
					f.lost(w, []string{id})
				}
			}
		}()
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	checkFetched(t, f)
}
