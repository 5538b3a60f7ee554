package server

import (
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// fetchedSweepEvery bounds how often a full fetchedJobs forgets expired jobs: a sweep reads every
// remembered job, so it must not run on every fetch while the table stays full.
const fetchedSweepEvery = time.Second

// fetchedJobs remembers the jobs this server handed to workers until they ack or nack them, so that
// the outcome needs one statement instead of a read and a write. It is only a shortcut: an outcome
// for a job not remembered here (fetched through another server, or forgotten) reads the job first,
// and one for a job that moved on since is refused by the store's attempt guard either way.
//
// Every operation costs in proportion to the jobs it touches, not to the jobs remembered: with
// 100,000 fetched and unacknowledged jobs, a scan per fetch under the lock once made 100 concurrent
// clients crawl at a few hundred requests a second.
type fetchedJobs struct {
	mu       sync.Mutex
	jobs     map[string]*pronto.JobRow
	byWorker map[string]map[string]struct{} // worker id → ids of its remembered jobs
	max      int
	// soonest is no later than the earliest lease expiry of a remembered job: before it, a sweep
	// would find nothing to forget.
	soonest   time.Time
	lastSweep time.Time
	sweeps    int // sweeps run, for tests
}

func newFetchedJobs(max int) *fetchedJobs {
	return &fetchedJobs{jobs: make(map[string]*pronto.JobRow), byWorker: make(map[string]map[string]struct{}), max: max}
}

// add remembers fetched jobs. When full, it first forgets jobs whose lease has run out (at most once
// per fetchedSweepEvery, and only once one can have); if it is still full, it remembers nothing more
// until outcomes free room.
func (f *fetchedJobs) add(jobs []*pronto.JobRow) {
	if len(jobs) == 0 || f.max <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.jobs)+len(jobs) > f.max {
		now := time.Now()
		if !now.Before(f.soonest) && now.Sub(f.lastSweep) >= fetchedSweepEvery {
			f.sweep(now)
		}
	}
	for _, j := range jobs {
		if len(f.jobs) >= f.max {
			return
		}
		if len(f.jobs) == 0 || j.LeaseExpiresAt.Before(f.soonest) {
			f.soonest = j.LeaseExpiresAt
		}
		f.forget(j.ID) // a job fetched again replaces its old entry
		f.jobs[j.ID] = j
		ids := f.byWorker[j.WorkerID]
		if ids == nil {
			ids = make(map[string]struct{})
			f.byWorker[j.WorkerID] = ids
		}
		ids[j.ID] = struct{}{}
	}
}

// sweep forgets the jobs whose lease ran out by now and recomputes soonest. f.mu is held.
func (f *fetchedJobs) sweep(now time.Time) {
	f.sweeps++
	f.lastSweep = now
	var soonest time.Time
	for id, j := range f.jobs {
		switch {
		case j.LeaseExpiresAt.Before(now):
			f.forget(id)
		case soonest.IsZero() || j.LeaseExpiresAt.Before(soonest):
			soonest = j.LeaseExpiresAt
		}
	}
	f.soonest = soonest
}

// forget removes job id from both indexes. f.mu is held.
func (f *fetchedJobs) forget(id string) {
	j := f.jobs[id]
	if j == nil {
		return
	}
	delete(f.jobs, id)
	if ids := f.byWorker[j.WorkerID]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(f.byWorker, j.WorkerID)
		}
	}
}

// take returns and forgets the job with id, or nil.
func (f *fetchedJobs) take(id string) *pronto.JobRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	f.forget(id)
	return j
}

func (f *fetchedJobs) reset() {
	f.mu.Lock()
	clear(f.jobs)
	clear(f.byWorker)
	f.soonest, f.lastSweep = time.Time{}, time.Time{}
	f.mu.Unlock()
}

// heldBy returns the ids of the remembered jobs fetched by workerID whose lease has not run out: what
// a heartbeat that carries only a count of active jobs extends.
func (f *fetchedJobs) heldBy(workerID string) []string {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.byWorker[workerID] {
		if f.jobs[id].LeaseExpiresAt.After(now) {
			ids = append(ids, id)
		}
	}
	return ids
}
