package server

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// fetchedJobs remembers the jobs this server handed to workers until they ack or nack them, so that
// the outcome needs one statement instead of a read and a write, and so that a heartbeat carrying
// only a count of active jobs (the OJS Go SDK's) knows which jobs the worker holds. It is only a
// shortcut: an outcome for a job not remembered here (fetched through another server, or forgotten)
// reads the job first, and one for a job that moved on since is refused by the store's attempt
// guard either way.
//
// Each remembered job carries the end of its lease as this server last set it (at the fetch, then at
// each heartbeat that extended it). A job whose lease ended is forgotten lazily. When the table is
// full, the job whose lease ends first gives way to the newly fetched one: it is the one fetched
// longest ago and never heartbeated since, the likeliest to have been abandoned (workers that
// fetch without ever acking once filled the table for good, and every outcome after that paid a
// read). Every operation costs in proportion to the jobs it touches, O(log n) each, never a scan of
// the table.
type fetchedJobs struct {
	mu       sync.Mutex
	jobs     map[string]*fetchedEntry
	byLease  fetchedHeap                    // every remembered job, earliest lease end first
	byWorker map[string]map[string]struct{} // worker id → ids of its remembered jobs
	max      int
	evicted  int // live jobs forgotten to make room, for tests
}

// fetchedEntry is one remembered job.
type fetchedEntry struct {
	job      *pronto.JobRow
	leaseEnd time.Time
	index    int // position in byLease
}

func newFetchedJobs(max int) *fetchedJobs {
	return &fetchedJobs{jobs: make(map[string]*fetchedEntry), byWorker: make(map[string]map[string]struct{}), max: max}
}

// add remembers fetched jobs, each until its LeaseExpiresAt. A job fetched again replaces its old
// entry. Jobs whose lease ended are forgotten first; when the table is still full, the jobs whose
// lease ends first.
func (f *fetchedJobs) add(jobs []*pronto.JobRow) {
	if len(jobs) == 0 || f.max <= 0 {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	// Expired jobs go first: each is popped once, so this costs O(log n) per job over its life.
	for len(f.byLease) > 0 && f.byLease[0].leaseEnd.Before(now) {
		f.forget(f.byLease[0].job.ID)
	}
	for _, j := range jobs {
		f.forget(j.ID)
		for len(f.jobs) >= f.max {
			f.evicted++
			f.forget(f.byLease[0].job.ID)
		}
		e := &fetchedEntry{job: j, leaseEnd: j.LeaseExpiresAt}
		f.jobs[j.ID] = e
		heap.Push(&f.byLease, e)
		ids := f.byWorker[j.WorkerID]
		if ids == nil {
			ids = make(map[string]struct{})
			f.byWorker[j.WorkerID] = ids
		}
		ids[j.ID] = struct{}{}
	}
}

// forget removes job id from every index. f.mu is held.
func (f *fetchedJobs) forget(id string) {
	e := f.jobs[id]
	if e == nil {
		return
	}
	delete(f.jobs, id)
	heap.Remove(&f.byLease, e.index)
	if ids := f.byWorker[e.job.WorkerID]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(f.byWorker, e.job.WorkerID)
		}
	}
}

// get returns the remembered job with id, or nil.
func (f *fetchedJobs) get(id string) *pronto.JobRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.jobs[id]; e != nil {
		return e.job
	}
	return nil
}

// decided forgets j, a job get returned, after an ack or nack of it ended in err: unless the store
// refused the outcome for a reason that leaves the worker holding the job (invalid input, a database
// error), it is no longer the worker's. An entry that replaced j since (the job fetched again)
// stays.
func (f *fetchedJobs) decided(j *pronto.JobRow, err error) {
	if j == nil || (err != nil && stillHeld(err)) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.jobs[j.ID]; e != nil && e.job == j {
		f.forget(j.ID)
	}
}

// stillHeld reports whether an outcome refused with err leaves the job with the worker that sent it:
// not when the job moved on (a transition or stale-claim refusal) or is gone.
func stillHeld(err error) bool {
	var te *pronto.TransitionError
	var sc *pronto.StaleClaimError
	return !errors.As(err, &te) && !errors.As(err, &sc) && !errors.Is(err, pronto.ErrNotFound)
}

// extended records that the leases of the remembered jobs among ids now end at until (a heartbeat
// extended them), so that later count-only heartbeats go on finding them.
func (f *fetchedJobs) extended(ids []string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if e := f.jobs[id]; e != nil {
			e.leaseEnd = until
			heap.Fix(&f.byLease, e.index)
		}
	}
}

// lost forgets the jobs among ids that were remembered as workerID's, which a heartbeat of
// workerID found it no longer holds. Another worker's jobs stay: a heartbeat naming them is wrong
// about them, not about the worker that fetched them.
func (f *fetchedJobs) lost(workerID string, ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if e := f.jobs[id]; e != nil && e.job.WorkerID == workerID {
			f.forget(id)
		}
	}
}

func (f *fetchedJobs) reset() {
	f.mu.Lock()
	clear(f.jobs)
	clear(f.byWorker)
	f.byLease = nil
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
		if f.jobs[id].leaseEnd.After(now) {
			ids = append(ids, id)
		}
	}
	return ids
}

// fetchedHeap orders remembered jobs by lease end (container/heap).
type fetchedHeap []*fetchedEntry

func (h fetchedHeap) Len() int           { return len(h) }
func (h fetchedHeap) Less(i, j int) bool { return h[i].leaseEnd.Before(h[j].leaseEnd) }
func (h fetchedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *fetchedHeap) Push(x any) {
	e := x.(*fetchedEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *fetchedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
