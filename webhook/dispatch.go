package webhook

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Event is one event to deliver: its envelope (Body, a JSON object) and what the filters read.
type Event struct {
	ID      string
	Type    string
	Queue   string // "" for an event about no queue
	JobType string // "" for an event about no job
	Body    json.RawMessage
}

// Dispatcher turns events into delivery jobs, one per event and webhook that takes it. Publish never
// blocks: events wait in a buffer that a goroutine of the Dispatcher empties into the store, in
// batches, as delivery jobs in Queue. An event still in the buffer when the process dies is not
// delivered; from its job's insert on, its delivery survives anything. Its methods are safe for
// concurrent use.
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

// Dropped returns how many events were not delivered because the buffer was full or their insert
// failed.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// Refresh rereads the registrations now, without waiting for RefreshInterval: call it after a change
// made through this process, so that the events recorded once it returns follow the change.
func (d *Dispatcher) Refresh(ctx context.Context) {
	d.reload(ctx)
}

// Close inserts the events already published (bounded by ctx) and stops the Dispatcher.
func (d *Dispatcher) Close(ctx context.Context) {
	d.stop()
	d.done.Wait()
	var left []Event
	for {
		select {
		case e := <-d.ch:
			left = append(left, e)
		default:
			if len(left) > 0 {
				d.insert(ctx, left)
			}
			return
		}
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
	batch := make([]Event, 0, dispatchBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-d.ch:
			batch = append(batch[:0], e)
		}
	fill:
		for len(batch) < dispatchBatch {
			select {
			case e := <-d.ch:
				batch = append(batch, e)
			default:
				break fill
			}
		}
		d.insert(context.WithoutCancel(ctx), batch)
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

// opts are the insert options of w's deliveries: Queue, and the delivery backoff with w's attempts.
func (d *Dispatcher) opts(w *Webhook) *pronto.InsertOpts {
	rp := d.backoff
	rp.MaxAttempts = w.maxAttempts()
	return &pronto.InsertOpts{Queue: Queue, RetryPolicy: &rp}
}

// insert stores the delivery jobs of events: one per event and webhook that takes it.
func (d *Dispatcher) insert(ctx context.Context, events []Event) {
	hooks := *d.hooks.Load()
	var ps []pronto.InsertManyParams
	for _, e := range events {
		for i := range hooks {
			w := &hooks[i]
			if !w.Matches(e.Type, e.Queue, e.JobType) {
				continue
			}
			ps = append(ps, pronto.InsertManyParams{Args: d.args(w, e), Opts: d.opts(w)})
		}
	}
	if len(ps) == 0 {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.client.InsertMany(ictx, ps); err != nil {
		d.dropped.Add(int64(len(events)))
		d.log.Warn("pronto webhooks: the delivery jobs of events could not be inserted; those events are not delivered",
			"events", len(events), "err", err)
	}
}
