package server

import (
	"sync"
	"sync/atomic"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// enqueueOrder keeps a job's job.enqueued ahead of its other events (ojs-events.md 5.2: one job's
// events in lifecycle order) when this server inserts the job and a worker fetches, or even
// completes, it before the insert call returns. The insert marks the ids it inserts before it
// starts. Only the ids of inserts in flight are kept. Jobs inserted by other processes are not
// ordered: their job.enqueued is not in this server's log at all.
//
// An id the server gave is new: the first other event of its job records job.enqueued itself, and
// the insert then leaves it out. An id the request gave may name a job that exists already (a
// client sending a request again, which the store refuses), whose events must not gain a second
// job.enqueued; so the job's events are held instead, until an insert of the id records its
// job.enqueued (the job is the new one) or every insert of the id has ended without (the job is
// the one that existed: its events go to the log as they came).
type enqueueOrder struct {
	mu      sync.Mutex
	pending map[string]*pendingEnqueue
	// holding counts the pending ids that an insert was given (see hold): while it is 0, recording
	// a job event takes no lock here.
	holding atomic.Int64
}

// pendingEnqueue is the state of one id being inserted.
type pendingEnqueue struct {
	inserts  int  // inserts in flight with this id (several may race with one given id)
	given    bool // a request gave the id: the job's events are held until recorded
	recorded bool // its job.enqueued is recorded
	held     []event
	log      *eventLog // where the held events go
}

// begin marks ids, which this server gave, as being inserted by it.
func (o *enqueueOrder) begin(ids []string) { o.mark(ids, false) }

// beginGiven marks ids, which the requests gave, as being inserted by this server.
func (o *enqueueOrder) beginGiven(ids []string) { o.mark(ids, true) }

func (o *enqueueOrder) mark(ids []string, given bool) {
	if len(ids) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending == nil {
		o.pending = make(map[string]*pendingEnqueue, len(ids))
	}
	for _, id := range ids {
		p := o.pending[id]
		if p == nil {
			p = &pendingEnqueue{}
			o.pending[id] = p
		}
		p.inserts++
		if given && !p.given {
			p.given = true
			o.holding.Add(1)
		}
	}
}

// end forgets the ids begin or beginGiven marked, once the insert's events are recorded (or it
// failed). The last insert of an id to end releases the events still held for it: no insert
// recorded job.enqueued, so the job is one that existed before.
func (o *enqueueOrder) end(ids []string) {
	if len(ids) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		p, ok := o.pending[id]
		if !ok {
			continue
		}
		if p.inserts > 1 {
			p.inserts--
			continue
		}
		delete(o.pending, id)
		if p.given {
			o.holding.Add(-1)
		}
		o.release(p)
	}
}

// release adds the events held for p to their log, in the order they came.
func (o *enqueueOrder) release(p *pendingEnqueue) {
	for _, e := range p.held {
		p.log.add(e)
	}
	p.held = nil
}

// inserted adds to log the event mk returns, the insert's own job.enqueued (or job.scheduled) of
// id, unless another event of the job recorded job.enqueued first; then the events held for the
// job. It runs under the lock, so that an event of the job that comes next finds it recorded.
func (o *enqueueOrder) inserted(id string, log *eventLog, mk func() (event, bool)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.pending[id]
	if p != nil && p.recorded {
		return
	}
	if e, ok := mk(); ok {
		log.add(e)
	}
	if p != nil {
		p.recorded = true
		o.release(p)
	}
}

// before adds to log the event mk returns, job.enqueued of j, when j's insert through this server
// is still in flight, with an id this server gave, and nothing recorded it yet. Call it before
// recording any other event of j. A job past its first attempt was fetched before: only the
// duplicate of a given id that an insert in flight is about to be refused can be marked then, and
// its job.enqueued is long recorded.
func (o *enqueueOrder) before(j *pronto.JobRow, log *eventLog, mk func() event) {
	if j.Attempt > 1 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.pending[j.ID]; p != nil && !p.recorded && !p.given {
		log.add(mk())
		p.recorded = true
	}
}

// add adds e, an event of job e.subject, to log, or holds it while an insert given the job's id
// is in flight and has not recorded job.enqueued (see enqueueOrder).
func (o *enqueueOrder) add(e event, log *eventLog) {
	// holding is raised before the insert it counts starts: an event of a job that insert stores
	// comes after the insert stored it, so it finds holding raised.
	if o.holding.Load() == 0 {
		log.add(e)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.pending[e.subject]; p != nil && p.given && !p.recorded {
		p.held, p.log = append(p.held, e), log
		return
	}
	log.add(e)
}

// beginInsert gives every job of jobs without an id a new one, as the client would, and marks the
// ids of jobs as being inserted (enqueueOrder): those it gave, and those the request gave. Pass its
// result to s.order.end once the inserted rows' events are recorded.
func (s *Server) beginInsert(jobs []pronto.OJSJob) []string {
	ids := make([]string, 0, len(jobs))
	var given []string
	for i := range jobs {
		if jobs[i].Opts.ID == "" {
			jobs[i].Opts.ID = uuidv7.New()
			ids = append(ids, jobs[i].Opts.ID)
		} else {
			given = append(given, jobs[i].Opts.ID)
		}
	}
	s.order.begin(ids)
	s.order.beginGiven(given)
	return append(ids, given...)
}

// enqueuedFirst records job.enqueued of j before its other events when its insert through this
// server has not recorded it yet (enqueueOrder).
func (s *Server) enqueuedFirst(j *pronto.JobRow) {
	s.order.before(j, s.events, func() event {
		return s.jobEventOf("job.enqueued", j, j.CreatedAt, event{form: formEnqueued, n1: int64(j.Priority)})
	})
}
