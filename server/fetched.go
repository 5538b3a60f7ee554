package server

import (
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// fetchedJobs remembers the jobs this server handed to workers until they ack or nack them, so that
// the outcome needs one statement instead of a read and a write. It is only a shortcut: an outcome
// for a job not remembered here (fetched through another server, or forgotten) reads the job first,
// and one for a job that moved on since is refused by the store's attempt guard either way.
type fetchedJobs struct {
	mu   sync.Mutex
	jobs map[string]*pronto.JobRow
	max  int
}

func newFetchedJobs(max int) *fetchedJobs {
	return &fetchedJobs{jobs: make(map[string]*pronto.JobRow), max: max}
}

// add remembers fetched jobs. When full, it first forgets jobs whose lease has run out; if it is still
// full, it remembers nothing more until outcomes free room.
func (f *fetchedJobs) add(jobs []*pronto.JobRow) {
	if len(jobs) == 0 || f.max <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.jobs)+len(jobs) > f.max {
		now := time.Now()
		for id, j := range f.jobs {
			if j.LeaseExpiresAt.Before(now) {
				delete(f.jobs, id)
			}
		}
	}
	for _, j := range jobs {
		if len(f.jobs) >= f.max {
			return
		}
		f.jobs[j.ID] = j
	}
}

// take returns and forgets the job with id, or nil.
func (f *fetchedJobs) take(id string) *pronto.JobRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j != nil {
		delete(f.jobs, id)
	}
	return j
}

func (f *fetchedJobs) reset() {
	f.mu.Lock()
	clear(f.jobs)
	f.mu.Unlock()
}

// heldBy returns the ids of the remembered jobs fetched by workerID whose lease has not run out: what
// a heartbeat that carries only a count of active jobs extends.
func (f *fetchedJobs) heldBy(workerID string) []string {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, j := range f.jobs {
		if j.WorkerID == workerID && j.LeaseExpiresAt.After(now) {
			ids = append(ids, id)
		}
	}
	return ids
}
