package server

import (
	"sync"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// enqueueOrder keeps a job's job.enqueued ahead of its other events (ojs-events.md 5.2: one job's
// events in lifecycle order) when this server inserts the job and a worker fetches, or even
// completes, it before the insert call returns. The insert marks the ids it inserts before it
// starts; the first other event of a marked job records job.enqueued itself, and the insert then
// leaves it out. Only the ids of inserts in flight are kept. Jobs inserted by other processes are
// not ordered: their job.enqueued is not in this server's log at all.
type enqueueOrder struct {
	mu      sync.Mutex
	pending map[string]pendingEnqueue
}

// pendingEnqueue is the state of one id being inserted.
type pendingEnqueue struct {
	inserts  int  // inserts in flight with this id (two may race with one given id)
	recorded bool // its job.enqueued is recorded
}

// begin marks ids as being inserted by this server.
func (o *enqueueOrder) begin(ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending == nil {
		o.pending = make(map[string]pendingEnqueue, len(ids))
	}
	for _, id := range ids {
		p := o.pending[id]
		p.inserts++
		o.pending[id] = p
	}
}

// end forgets the ids begin marked, once the insert's events are recorded (or it failed).
func (o *enqueueOrder) end(ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if p, ok := o.pending[id]; ok && p.inserts > 1 {
			p.inserts--
			o.pending[id] = p
		} else {
			delete(o.pending, id)
		}
	}
}

// inserted runs record, the insert's own job.enqueued (or job.scheduled) of id, unless another event
// of the job recorded job.enqueued first. It runs under the lock, so that an event of the job that
// comes next finds it recorded.
func (o *enqueueOrder) inserted(id string, record func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.pending[id]
	if ok && p.recorded {
		return
	}
	record()
	if ok {
		p.recorded = true
		o.pending[id] = p
	}
}

// before runs record, job.enqueued of j, when j's insert through this server is still in flight
// and nothing recorded it yet. Call it before recording any other event of j. A job past its first
// attempt was fetched before: only the duplicate of a given id that an insert in flight is about to
// be refused can be marked then, and its job.enqueued is long recorded.
func (o *enqueueOrder) before(j *pronto.JobRow, record func()) {
	if j.Attempt > 1 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.pending[j.ID]; ok && !p.recorded {
		record()
		p.recorded = true
		o.pending[j.ID] = p
	}
}

// beginInsert gives every job of jobs without an id a new one, as the client would, and marks those
// ids as being inserted (enqueueOrder). Pass its result to s.order.end once the inserted rows'
// events are recorded. An id the request gave is not marked: it may name a job that exists (a
// client sending a request again), whose events must not be reordered by an insert that will be
// refused.
func (s *Server) beginInsert(jobs []pronto.OJSJob) []string {
	ids := make([]string, 0, len(jobs))
	for i := range jobs {
		if jobs[i].Opts.ID == "" {
			jobs[i].Opts.ID = uuidv7.New()
			ids = append(ids, jobs[i].Opts.ID)
		}
	}
	s.order.begin(ids)
	return ids
}

// enqueuedFirst records job.enqueued of j before its other events when its insert through this
// server has not recorded it yet (enqueueOrder).
func (s *Server) enqueuedFirst(j *pronto.JobRow) {
	s.order.before(j, func() {
		s.jobEventForm("job.enqueued", j, j.CreatedAt, event{form: formEnqueued, n1: int64(j.Priority)})
	})
}
