package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

func fetchedRow(id, worker string, lease time.Time) *pronto.JobRow {
	return &pronto.JobRow{ID: id, WorkerID: worker, LeaseExpiresAt: lease}
}

// TestFetchedJobsFullDoesNotRescan: once the table is full of live leases, further fetches neither
// remember more nor read the whole table again each time (a sweep per fetch made 100 clients crawl);
// once leases run out, a sweep frees their room.
func TestFetchedJobsFullDoesNotRescan(t *testing.T) {
	f := newFetchedJobs(100)
	live := time.Now().Add(time.Hour)
	for i := range 100 {
		f.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("live", i), "w", live)})
	}
	for i := range 1000 {
		f.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("more", i), "w", live)})
	}
	if len(f.jobs) != 100 {
		t.Fatalf("a full table remembered more: %d", len(f.jobs))
	}
	if f.sweeps != 0 {
		t.Fatalf("%d sweeps while no lease could have run out", f.sweeps)
	}

	g := newFetchedJobs(100)
	past := time.Now().Add(-time.Second)
	for i := range 60 {
		g.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("old", i), "w", past)})
	}
	for i := range 40 {
		g.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("live", i), "w", live)})
	}
	for i := range 1000 {
		g.add([]*pronto.JobRow{fetchedRow(fmt.Sprint("new", i), "x", live)})
	}
	if g.sweeps != 1 {
		t.Fatalf("sweeps: %d, want one (expired leases freed room once; the rest waits for the next interval)", g.sweeps)
	}
	if len(g.jobs) != 100 || g.take("old0") != nil || g.take("live0") == nil || g.take("new0") == nil {
		t.Fatalf("after the sweep: %d jobs remembered; expired forgotten, live kept, new ones added", len(g.jobs))
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
