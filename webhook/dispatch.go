package webhook

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Event is one event to deliver: its envelope (Body, a JSON object) and what the filters read.
type Event struct {
	ID      string
	Type    string
	Queue   string // "" for an event about no queue
	JobType string // "" for an event about no job
	Body    json.RawMessage
	// Subject orders deliveries: a webhook is sent the events of one Subject in the order they were
	// published, each once the one before it is delivered or given up (ojs-events.md §9.2: one
	// job's events in lifecycle order). pronto serve sets it to the job's id for job events and to
	// the workflow's for workflow events; "" leaves the event's delivery unordered.
	Subject string
}

// Dispatcher turns events into delivery jobs, one per event and webhook that takes it. Publish never
// blocks: events wait in a buffer that a goroutine of the Dispatcher empties into the store, in
// batches, as delivery jobs in Queue. A batch the store fails to take is tried again, with backoff,
// until it goes in (a store that restarts loses nothing, and an attempt whose answer was lost after
// it stored the jobs stores nothing twice: the jobs' ids are chosen once); one it refuses is split,
// so that only the events whose own jobs it refuses are lost. An event still in the buffer when the
// process dies is not delivered; from its job's insert on, its delivery survives anything.
//
// Deliveries of one Subject to one webhook are chained: each job names the delivery of the
// subject's previous event to the same webhook (remembered for the MaxOrderedSubjects subjects
// published most recently through this Dispatcher), and the worker posts it only once that one is
// over. Its methods are safe for concurrent use.
type Dispatcher struct {
	client *pronto.Client
	ss     store.SettingStore
	log    *slog.Logger

	hooks     atomic.Pointer[[]Webhook] // the registrations, reread every RefreshInterval
	ch        chan Event
	dropped   atomic.Int64
	reloading sync.Mutex
	backoff   pronto.RetryPolicy // of the delivery jobs, MaxAttempts set per webhook
	stop      context.CancelFunc
	done      sync.WaitGroup
	// unsent is the batch the inserting goroutine held when it stopped, for Close to insert.
	unsent []planned

	chainsMu sync.Mutex
	chains   chains
}

// planned is an event with its delivery jobs, planned once (ids and chain links chosen) so that
// every attempt at inserting them stores the same jobs.
type planned struct {
	event Event
	jobs  []pronto.InsertManyParams
}

// Dispatcher defaults.
const (
	// RefreshInterval is how often a Dispatcher rereads the registrations: a webhook registered
	// through another process takes events from then on.
	RefreshInterval = time.Second
	// DispatchBuffer is how many events wait for their jobs' insert at most; more are dropped
	// (counted by Dropped), so that a store that cannot take inserts never holds up the events'
	// producers.
	DispatchBuffer = 10000
	// dispatchBatch is the most events one insert carries.
	dispatchBatch = 500
	// insertRetryFirst and insertRetryMax are the first and the longest pause before a failed
	// insert of delivery jobs is tried again. Meanwhile new events wait in the buffer.
	insertRetryFirst = 100 * time.Millisecond
	insertRetryMax   = 5 * time.Second
	// MaxOrderedSubjects is how many (webhook, Subject) pairs a Dispatcher remembers the latest
	// delivery of, the least recently published forgotten first: an event of a forgotten subject
	// is delivered without waiting for the subject's earlier deliveries. About 200 bytes each.
	MaxOrderedSubjects = 65536
)

// DispatcherOptions tunes NewDispatcher. The zero value takes every default.
type DispatcherOptions struct {
	// Logger gets a line when events are dropped or an insert fails (default slog.Default()).
	Logger *slog.Logger
	// RetryInterval is the delay before a failed delivery's first retry (default
	// DefaultRetryInterval); it doubles at each retry, up to MaxRetryInterval (default
	// DefaultMaxRetryInterval), with jitter.
	RetryInterval, MaxRetryInterval time.Duration
}

// The delivery backoff's defaults: with them the 12th try (DefaultMaxAttempts) comes about 5 hours
// after the first, and the 25th (MaxAttemptsLimit) about 31 hours after.
const (
	DefaultRetryInterval    = 10 * time.Second
	DefaultMaxRetryInterval = 2 * time.Hour
)

// NewDispatcher starts a Dispatcher inserting through client; ss holds the registrations (the
// client's store). Close stops it.
func NewDispatcher(client *pronto.Client, ss store.SettingStore, opts *DispatcherOptions) *Dispatcher {
	var o DispatcherOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = DefaultMaxRetryInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{client: client, ss: ss, log: o.Logger, ch: make(chan Event, DispatchBuffer),
		stop:    cancel,
		chains:  newChains(MaxOrderedSubjects),
		backoff: pronto.RetryPolicy{InitialInterval: o.RetryInterval, BackoffCoefficient: 2, MaxInterval: o.MaxRetryInterval}}
	d.hooks.Store(&[]Webhook{})
	d.reload(ctx)
	d.done.Add(2)
	go d.watch(ctx)
	go d.run(ctx)
	return d
}

// Wants reports whether some webhook takes an event of type typ about a job of jobType in queue:
// the cheap check to make before building an event's envelope. Events of Queue are never wanted.
func (d *Dispatcher) Wants(typ, queue, jobType string) bool {
	if queue == Queue {
		return false
	}
	hooks := *d.hooks.Load()
	for i := range hooks {
		if hooks[i].Matches(typ, queue, jobType) {
			return true
		}
	}
	return false
}

// Publish hands e over for delivery to the webhooks that take it, without waiting; when the buffer
// is full the event is dropped and counted.
func (d *Dispatcher) Publish(e Event) {
	if !d.Wants(e.Type, e.Queue, e.JobType) {
		return
	}
	select {
	case d.ch <- e:
	default:
		if d.dropped.Add(1) == 1 {
			d.log.Warn("pronto webhooks: events are dropped: the delivery jobs cannot be inserted as fast as events come", "buffer", DispatchBuffer)
		}
	}
}

// Dropped returns how many events were not delivered because the buffer was full, the store refused
// their delivery jobs, or Close's context ended before the store took them.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// Refresh rereads the registrations now, without waiting for RefreshInterval: call it after a change
// made through this process, so that the events recorded once it returns follow the change.
func (d *Dispatcher) Refresh(ctx context.Context) {
	d.reload(ctx)
}

// Close inserts the events already published, trying again while the store fails, until ctx ends,
// and stops the Dispatcher.
func (d *Dispatcher) Close(ctx context.Context) {
	d.stop()
	d.done.Wait()
	left := d.unsent
drain:
	for {
		select {
		case e := <-d.ch:
			left = append(left, d.plan(e))
		default:
			break drain
		}
	}
	if len(left) == 0 {
		return
	}
	if rest := d.insert(ctx, ctx, left); len(rest) > 0 {
		d.dropped.Add(int64(len(rest)))
		d.log.Warn("pronto webhooks: closed before the store took the delivery jobs of events; those events are not delivered",
			"events", len(rest))
	}
}

// watch rereads the registrations every RefreshInterval.
func (d *Dispatcher) watch(ctx context.Context) {
	defer d.done.Done()
	t := time.NewTicker(RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.reload(ctx)
	}
}

// reload rereads the registrations. Reloads take turns, so that a slower read never replaces what a
// later one stored.
func (d *Dispatcher) reload(ctx context.Context) {
	d.reloading.Lock()
	defer d.reloading.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hooks, err := List(rctx, d.ss)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("pronto webhooks: cannot read the registrations; the last ones read stay in force", "err", err)
		}
		return
	}
	d.hooks.Store(&hooks)
}

// run inserts the published events' delivery jobs, a batch at a time.
func (d *Dispatcher) run(ctx context.Context) {
	defer d.done.Done()
	batch := make([]planned, 0, dispatchBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-d.ch:
			batch = append(batch[:0], d.plan(e))
		}
	fill:
		for len(batch) < dispatchBatch {
			select {
			case e := <-d.ch:
				batch = append(batch, d.plan(e))
			default:
				break fill
			}
		}
		// A statement in flight finishes even when Close comes: its jobs may be stored already.
		if rest := d.insert(context.WithoutCancel(ctx), ctx, batch); len(rest) > 0 {
			d.unsent = rest // stopped while the store failed: Close tries again
			return
		}
	}
}

// Deliver inserts the delivery job of e to w alone, whatever w's filters (a test event, say), and
// returns it.
func (d *Dispatcher) Deliver(ctx context.Context, w *Webhook, e Event) (*pronto.JobRow, error) {
	return d.client.Insert(ctx, d.args(w, e), d.opts(w))
}

func (d *Dispatcher) args(w *Webhook, e Event) deliverArgs {
	return deliverArgs{WebhookID: w.ID, EventID: e.ID, EventType: e.Type, Event: e.Body}
}

// plan makes e's delivery jobs, one per webhook that takes it now: their ids, and for an event with
// a Subject the delivery each waits for (the subject's latest to the same webhook).
func (d *Dispatcher) plan(e Event) planned {
	p := planned{event: e}
	hooks := *d.hooks.Load()
	for i := range hooks {
		w := &hooks[i]
		if !w.Matches(e.Type, e.Queue, e.JobType) {
			continue
		}
		a, o := d.args(w, e), d.opts(w)
		o.ID = uuidv7.New()
		if e.Subject != "" {
			d.chainsMu.Lock()
			a.After = d.chains.link(w.ID+"\x00"+e.Subject, o.ID)
			d.chainsMu.Unlock()
		}
		p.jobs = append(p.jobs, pronto.InsertManyParams{Args: a, Opts: o})
	}
	return p
}

// chains maps a (webhook, subject) pair to the id of its latest delivery job, forgetting the least
// recently linked pair beyond its bound.
type chains struct {
	max   int
	links map[string]*list.Element // of *chainLink
	lru   list.List                // most recently linked first
}

type chainLink struct {
	key, last string
}

func newChains(max int) chains {
	return chains{max: max, links: make(map[string]*list.Element)}
}

// link records id as key's latest delivery and returns the one before it ("" for none known).
func (c *chains) link(key, id string) (prev string) {
	if el, ok := c.links[key]; ok {
		l := el.Value.(*chainLink)
		prev, l.last = l.last, id
		c.lru.MoveToFront(el)
		return prev
	}
	if c.lru.Len() >= c.max {
		oldest := c.lru.Back()
		delete(c.links, oldest.Value.(*chainLink).key)
		c.lru.Remove(oldest)
	}
	c.links[key] = c.lru.PushFront(&chainLink{key: key, last: id})
	return ""
}

// opts are the insert options of w's deliveries: Queue, and the delivery backoff with w's attempts.
func (d *Dispatcher) opts(w *Webhook) *pronto.InsertOpts {
	rp := d.backoff
	rp.MaxAttempts = w.maxAttempts()
	return &pronto.InsertOpts{Queue: Queue, RetryPolicy: &rp}
}

// insert stores the delivery jobs of events, trying again with backoff while the store fails for any
// reason but a refusal of the jobs' own data, until retry ends; it returns the events whose jobs
// were not stored by then. A refused batch is split: each event goes in alone, and an event whose
// own jobs are refused is dropped (counted, logged). So is a batch some of whose jobs exist, which
// an earlier attempt stored before its answer was lost: an event whose jobs exist is done. Each
// attempt's statement derives from stmt.
func (d *Dispatcher) insert(stmt, retry context.Context, events []planned) (unsent []planned) {
	pause := insertRetryFirst
	for failures := 0; ; failures++ {
		err := d.tryInsert(stmt, events)
		switch {
		case err == nil:
			if failures > 0 {
				d.log.Info("pronto webhooks: the delivery jobs of events were inserted after failures", "events", len(events), "failures", failures)
			}
			return nil
		case errors.Is(err, pronto.ErrClientStopped):
			return events // no later attempt can succeed
		case errors.Is(err, pronto.ErrDuplicate) && len(events) == 1:
			return nil // an earlier attempt stored them (an event's jobs go in together)
		case d.refused(err) && len(events) == 1:
			d.dropped.Add(1)
			d.log.Warn("pronto webhooks: the store refuses an event's delivery jobs; the event is not delivered",
				"event", events[0].event.ID, "type", events[0].event.Type, "err", err)
			return nil
		case d.refused(err) || errors.Is(err, pronto.ErrDuplicate):
			// One event's data is at fault, not the batch's: alone, only that event is lost.
			for i := range events {
				if rest := d.insert(stmt, retry, events[i:i+1]); len(rest) > 0 {
					return events[i:]
				}
			}
			return nil
		}
		if failures == 0 {
			d.log.Warn("pronto webhooks: inserting the delivery jobs of events failed; trying again", "events", len(events), "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-retry.Done():
			t.Stop()
			return events
		case <-t.C:
		}
		pause = min(2*pause, insertRetryMax)
	}
}

// refused reports whether err says the delivery jobs' own data is at fault, so that trying the same
// insert again can only fail again.
func (d *Dispatcher) refused(err error) bool {
	st, _ := d.ss.(store.Store)
	return errors.Is(err, pronto.ErrInvalidArgs) || store.IsRefused(st, err)
}

// tryInsert makes one attempt at storing the delivery jobs of events.
func (d *Dispatcher) tryInsert(ctx context.Context, events []planned) error {
	var ps []pronto.InsertManyParams
	for _, p := range events {
		ps = append(ps, p.jobs...)
	}
	if len(ps) == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := d.client.InsertMany(ictx, ps)
	return err
}
