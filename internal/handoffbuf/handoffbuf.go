// Package handoffbuf keeps the jobs a store's hand-off gave to a waiting producer until the
// producer's next Claim takes them, and gives back the ones it did not take in time. The PostgreSQL
// and Redis stores share it; each delivers the jobs its own way.
package handoffbuf

import (
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Buffer holds handed jobs with the time each arrived. Its methods are safe for concurrent use.
type Buffer struct {
	mu   sync.Mutex
	jobs []entry
	// expiring is set while an Expire call is due (see Add).
	expiring bool
}

type entry struct {
	job *store.Job
	at  time.Time
}

// Add files a job that arrived at at. It reports whether no Expire call was due: the caller then
// arranges one when the job goes stale, and Expire arranges the next, so one timer at a time
// watches the buffer however many jobs pass through it (a timer per job cost a goroutine per job).
// An owner that watches the buffer otherwise (calling Stale from a loop of its own) ignores it.
func (b *Buffer) Add(j *store.Job, at time.Time) (arm bool) {
	b.mu.Lock()
	b.jobs = append(b.jobs, entry{job: j, at: at})
	arm = !b.expiring
	b.expiring = true
	b.mu.Unlock()
	return arm
}

// Expire is Stale for an owner that arms a timer when Add says so: it removes and returns the jobs
// that arrived within or more before now and, while jobs remain, returns when the oldest of them
// goes stale, when the caller calls Expire again. When none remain it returns the zero time, and
// the next Add arms afresh.
func (b *Buffer) Expire(within time.Duration, now time.Time) (stale []*store.Job, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	stale = b.staleLocked(within, now)
	for _, e := range b.jobs {
		if next.IsZero() || e.at.Before(next) {
			next = e.at
		}
	}
	if next.IsZero() {
		b.expiring = false
		return stale, time.Time{}
	}
	return stale, next.Add(within)
}

// Take removes and returns up to limit jobs that arrived less than within before now, oldest first;
// older ones stay for Stale. When it takes any, it calls then with their number while still
// holding the buffer, so that whoever also looks at Len sees the take and its follow-up together.
func (b *Buffer) Take(limit int, within time.Duration, now time.Time, then func(taken int)) []*store.Job {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.jobs) == 0 {
		return nil
	}
	var out []*store.Job
	kept := b.jobs[:0]
	for _, e := range b.jobs {
		if len(out) < limit && now.Sub(e.at) < within {
			out = append(out, e.job)
		} else {
			kept = append(kept, e)
		}
	}
	clear(b.jobs[len(kept):])
	b.jobs = kept
	if len(out) > 0 && then != nil {
		then(len(out))
	}
	return out
}

// Stale removes and returns the jobs that arrived within or more before now.
func (b *Buffer) Stale(within time.Duration, now time.Time) []*store.Job {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.staleLocked(within, now)
}

func (b *Buffer) staleLocked(within time.Duration, now time.Time) []*store.Job {
	var stale []*store.Job
	kept := b.jobs[:0]
	for _, e := range b.jobs {
		if now.Sub(e.at) >= within {
			stale = append(stale, e.job)
		} else {
			kept = append(kept, e)
		}
	}
	clear(b.jobs[len(kept):])
	b.jobs = kept
	return stale
}

// Remove removes job id if the buffer holds it, and reports whether it did; with a token, only
// the job's run under that claim token.
func (b *Buffer) Remove(id, token string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.jobs {
		if e.job.ID == id && (token == "" || e.job.ClaimToken == token) {
			b.jobs = slices.Delete(b.jobs, i, i+1)
			return true
		}
	}
	return false
}

// Drain removes and returns every job.
func (b *Buffer) Drain() []*store.Job {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*store.Job, len(b.jobs))
	for i, e := range b.jobs {
		out[i] = e.job
	}
	b.jobs = nil
	return out
}

// Len returns how many jobs it holds; with f, it calls f with that number while holding the buffer.
func (b *Buffer) Len(f func(n int)) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f != nil {
		f(len(b.jobs))
	}
	return len(b.jobs)
}
