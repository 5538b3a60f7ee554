package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/internal/cancelset"
	"github.com/pronto-jobs/pronto/internal/completer"
	"github.com/pronto-jobs/pronto/internal/costcap"
	"github.com/pronto-jobs/pronto/internal/fairq"
	"github.com/pronto-jobs/pronto/internal/fetchbatch"
	"github.com/pronto-jobs/pronto/internal/finishbatch"
	"github.com/pronto-jobs/pronto/internal/insertbatch"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/maintenance"
	"github.com/pronto-jobs/pronto/internal/presence"
	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/store"
)

// Client inserts jobs, works them, and administers them, over one Store. It is safe for concurrent
// use. Build it with NewClient, call Start to work jobs, and Stop to shut down gracefully.
type Client struct {
	cfg    Config
	store  store.Store
	kinds  []string
	events eventBus
	work   []WorkMiddleware

	// schemaOK is set once the store's schema was found to match (see checkSchema).
	schemaOK atomic.Bool
	// schemaWatch stops claiming when an incompatible migration is applied under it (schemawatch.go).
	schemaWatch schemaWatch

	// offset is the store's clock's offset from this process's, by which an insert's Delay is
	// counted (insert_clock.go).
	offset storeOffset

	// inserts merges concurrent single-job inserts into batched store writes; nil when
	// Config.InsertBatchSize is 1 or the store's inserts are in-process (store.LocalInserter).
	inserts *insertbatch.Batcher
	// fetches merges concurrent remote fetches of a queue into shared claims, and finishes
	// concurrent remote outcomes into shared writes; nil when Config.FetchBatchSize is 1 or the
	// store is in-process.
	fetches  *fetchbatch.Batcher
	finishes *finishbatch.Batcher
	// progressChecks emits EventProgressCompleted for remotely acked runs (progresscheck.go).
	progressChecks progressChecks
	// limits follows the rate keys the client's claims found limited (ratelimit_events.go).
	limits limitEpisodes
	// queueCounts reads QueueList's counts, reusing a costly count for a while (admin.go).
	queueCounts costcap.Reader[[]QueueInfo]

	// bp is the client's view of queue bounds (backpressure.go).
	bp backpressure
	// tg is the client's view of tenant enqueue limits (tenantlimits.go).
	tg tenantGate
	// noisy is the noisy-neighbour check's state (tenantthrottle.go).
	noisy noisyDetector

	mu       sync.Mutex
	started  bool
	stopped  bool
	stopOnce sync.Once
	stopErr  error
	// stopDone is closed when the shutdown Stop began has ended (stopErr is then set).
	stopDone chan struct{}
	// stopWorkers is set while the shutdown gives the cancelled jobs' workers their moment to
	// return, and stopWorkersEnd (UnixNano) is when that moment ended: Stop's margin counts from then.
	stopWorkers    atomic.Bool
	stopWorkersEnd atomic.Int64

	producers  map[string]*producer.Producer
	pools      map[string]*fairq.Queue[jobTask]
	completer  *completer.Completer
	maintainer *maintenance.Maintainer
	// maintenanceCancel ends the maintainer's Run (which resigns leadership): at Stop, through
	// serviceCtx, or alone when the client halts for incompatible migrations (haltForSchema).
	maintenanceCancel context.CancelFunc
	unsubscribe       func()

	// Claim ownership (see internal/presence): the clients working a queue announce themselves
	// every presenceEvery, and of them only the one a notification's nonce picks claims at once.
	presence      *presence.Table
	presenceEvery time.Duration
	// cleanupEvery, when set (tests), replaces the leader's retention cleanup interval.
	cleanupEvery time.Duration
	// throttleExpiryEvery, when set (tests), replaces throttleExpiryInterval.
	throttleExpiryEvery time.Duration
	// retentionMu serializes this process's read-modify-write of the queues' retentions.
	retentionMu  sync.Mutex
	presenceDone chan struct{} // closed when the presence loop has returned
	overflowMu   sync.Mutex
	overflow     map[string]bool // queues whose jobs this client was to claim but had no free worker for
	overflowWake chan struct{}   // buffered(1): overflow has queues

	// Contexts of the running machinery: producers stop claiming first, then jobs are cancelled at
	// Stop's deadline, then the completer, heartbeat and maintenance stop.
	produceCancel   context.CancelFunc
	workCtx         context.Context
	workCancel      context.CancelCauseFunc
	workBase        context.Context // workCtx's parent, never cancelled: the runs' contexts derive from it
	serviceCtx      context.Context
	serviceCancel   context.CancelFunc
	completerCtx    context.Context
	completerCancel context.CancelFunc
	jobsWG          sync.WaitGroup
	executing       atomic.Int64 // jobs in jobsWG: handed to a worker pool and not yet returned
	servicesWG      sync.WaitGroup

	// The runs this client holds, keyed by run (see runKey), never by job id alone: a job whose lease
	// lapsed can be claimed again, by this very client, while its first run still goes on.
	runMu   sync.Mutex
	running map[string]*runningJob
	latest  map[string]*runningJob // by job id: the newest run of each job in running
	// cancels are the runs cancelled before this client registered them (see cancelLocal).
	cancels cancelset.Set
	// refused are the runs whose outcome the store refused before this client heard of any cancel,
	// by runKey, kept for cancelset.Kept: a cancel heard then reports them (see cancelLocal).
	refused map[string]refusedRun

	// cronHeld counts the cron leader's passes that maintenance mode held (RunCron); tests wait on it.
	cronHeld atomic.Int64

	// remoteProgress throttles progress reported over HTTP, per job (see JobProgressReport).
	remoteProgressMu sync.Mutex
	remoteProgress   map[string]*progressThrottle
	// remoteProgressLen is len(remoteProgress), set under remoteProgressMu, so that an outcome of a
	// job that never reported progress (most) takes no lock.
	remoteProgressLen atomic.Int64

	// commitWatch ends, at Stop, the goroutines that wait for the application's transaction of an
	// InsertTx or InsertSQLTx to commit (see afterCommit); commitWatches counts them.
	commitWatch       context.Context
	commitWatchCancel context.CancelFunc
	commitWatches     sync.WaitGroup

	// startedAt is when Start began working; completedRuns counts the attempts of this client's
	// workers that completed since. EventWorkerStopped reports both.
	startedAt     time.Time
	completedRuns atomic.Int64
}

// runningJob is one run of a claimed job this client holds: running, or finished with its outcome not
// yet written. Its lease is heartbeated until the outcome is written, unless a newer claim of the
// same job superseded it.
type runningJob struct {
	key string // runKey(row)
	row *JobRow
	// returned, made under runMu only when a newer run of the same job must wait for this one (rare),
	// is closed when the worker has returned: a newer run of the same job in this client starts only
	// then, so that two runs of one job never overlap in one process.
	returned chan struct{}
	cancel   context.CancelCauseFunc // nil once the worker returned
	// cancelHeard, under runMu, says a cancel of the run came after its worker returned: the store
	// then refuses its outcome, and Finished reports the cancel instead.
	cancelHeard bool
	// leaseUntil is the client's conservative reckoning of when the job's lease ends: the start of the
	// claim (or of the last heartbeat that extended it) plus LeaseDuration. Only the heartbeat loop
	// reads and writes it after execute, under runMu.
	leaseUntil time.Time
	// phase is runQueued until a worker takes the run up (runStarted); a prefetched run waits in its
	// queue's pool until then, and Stop may give it back (runReturned) without running it. The
	// moves are compare-and-swaps, so a run is either started or given back, never both.
	phase atomic.Int32
	// queuedAt is when the run was handed to its pool, in a queue that prefetches (else zero): its
	// start is then reported that much later than the claim's (see run).
	queuedAt time.Time

	// The run's Work-call state and context, and its outcome on its way to the store, live in the one
	// allocation a run makes (see execute), rather than in a holder, a context value and a callback
	// closure of their own: a drain of short jobs spends much of its CPU on allocating and collecting.
	holder resultHolder
	jctx   jobCtx
	out    pendingOutcome
}

// The phases of a run (runningJob.phase).
const (
	runQueued int32 = iota
	runStarted
	runReturned
)

// jobCtx is a job's context: the run's cancellable context, answering resultKey with the run's
// holder itself (as context.WithValue would, without its allocation).
type jobCtx struct {
	context.Context
	h *resultHolder
}

// Value returns the run's holder for resultKey and defers to the run's context for other keys.
func (c *jobCtx) Value(key any) any {
	if _, ok := key.(resultKey); ok {
		return c.h
	}
	return c.Context.Value(key)
}

// pendingOutcome is what a run's Finished callback needs of its outcome once it is written.
type pendingOutcome struct {
	comp         store.Completion
	kind         EventKind
	err          error
	dur          time.Duration
	now          time.Time
	progressed   bool
	progressData json.RawMessage
}

// NewClient returns a client over s. A nil cfg means an insert-only client with defaults.
func NewClient(s store.Store, cfg *Config) (*Client, error) {
	if s == nil {
		return nil, errors.New("pronto: NewClient: store is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cl := &Client{cfg: c, store: s, running: make(map[string]*runningJob), latest: make(map[string]*runningJob),
		work:          c.WorkMiddleware,
		presenceEvery: presenceInterval, overflow: make(map[string]bool), overflowWake: make(chan struct{}, 1)}
	if c.Workers != nil {
		cl.kinds = c.Workers.Kinds()
	}
	if local, ok := s.(store.LocalInserter); c.InsertBatchSize != 1 && !(ok && local.InsertsAreLocal()) {
		cl.inserts = insertbatch.New(insertbatch.Config{Insert: s.Insert, MaxBatch: c.InsertBatchSize})
	}
	if local, ok := s.(store.LocalInserter); c.FetchBatchSize != 1 && !(ok && local.InsertsAreLocal()) {
		// Whoever's fetch the jobs were held back in, or the keys found limited, this client tells.
		cl.fetches = fetchbatch.New(fetchbatch.Config{Claim: cl.remoteClaim, MaxSlots: c.FetchBatchSize,
			Release: func(ctx context.Context, jobs []*store.Job) { store.ReleaseClaimed(ctx, s, jobs) }})
		cl.finishes = finishbatch.New(finishbatch.Config{Finish: s.Finish, MaxBatch: c.FetchBatchSize})
	}
	cl.queueCounts = costcap.Reader[[]QueueInfo]{Read: s.ListQueues, Clone: cloneQueueInfos, Costly: costlyQueueCount}
	cl.commitWatch, cl.commitWatchCancel = context.WithCancel(context.Background())
	if c.Notifier != nil {
		cl.startRelay()
	}
	return cl, nil
}

// ID returns the client's id, as recorded on the jobs it holds.
func (c *Client) ID() string { return c.cfg.ID }

// Store returns the store the client works on.
func (c *Client) Store() store.Store { return c.store }

// IsLeader reports whether this client currently runs the cluster's maintenance.
func (c *Client) IsLeader() bool {
	c.mu.Lock()
	m := c.maintainer
	c.mu.Unlock()
	return m != nil && m.IsLeader()
}

// Subscribe returns a channel of this client's events of the given kinds (all kinds but EventStarted,
// EventCheckpointSaved, EventDeadLetterPruned, EventWorkerStopped and the tenant and rate-limit
// events when none are given) and a function that ends the subscription and closes the channel. Delivery never blocks the
// client: when the channel's buffer (1000 events) is full, events are dropped.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	return c.events.subscribe(1000, kinds)
}

// DroppedEvents returns how many events were not delivered because a subscriber's buffer was full.
func (c *Client) DroppedEvents() int64 { return c.events.dropped.Load() }

// Start begins working the configured queues and taking part in maintenance. It returns once the
// client is running; ctx only bounds start-up. The client runs until Stop.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrClientStopped
	}
	if c.started {
		return errors.New("pronto: client already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A missing or outdated schema fails here, not later in the logger only.
	if err := c.checkSchema(ctx); err != nil {
		return err
	}
	c.started = true
	c.startedAt = time.Now()
	base := context.WithoutCancel(ctx)

	var produceCtx context.Context
	produceCtx, c.produceCancel = context.WithCancel(base)
	c.workCtx, c.workCancel = context.WithCancelCause(base)
	c.workBase = base
	c.serviceCtx, c.serviceCancel = context.WithCancel(base)
	c.completerCtx, c.completerCancel = context.WithCancel(base)

	c.completer = completer.New(completer.Config{
		Finish:       c.store.Finish,
		MaxBatchSize: c.cfg.CompleterBatchSize,
		Linger:       c.cfg.CompleterLinger,
		Logger:       c.cfg.Logger,
		// Only an outcome whose own data the store refuses is ever given up: any other error (an
		// outage, a lock or statement timeout) may pass later, and a given-up outcome runs its job again.
		Transient: func(err error) bool { return !store.IsRefused(c.store, err) },
		// The store's own outage errors (SQLite busy, Redis loading, a closed pool) keep a batch
		// whole rather than being isolated outcome by outcome.
		Unavailable: func(err error) bool { return store.IsUnavailable(c.store, err) },
	})
	c.servicesWG.Add(1)
	go func() {
		defer c.servicesWG.Done()
		c.completer.Run(c.completerCtx)
	}()

	c.producers = make(map[string]*producer.Producer, len(c.cfg.Queues))
	c.pools = make(map[string]*fairq.Queue[jobTask], len(c.cfg.Queues))
	for name, q := range c.cfg.Queues {
		name := name
		// The producer claims into MaxWorkers slots and up to ahead more (QueueConfig.Prefetch); the
		// pool's queue holds the prefetched jobs until one of the MaxWorkers goroutines takes them up,
		// in turns across tenants (fairq).
		ahead := q.prefetchMax()
		tasks := fairq.New[jobTask]()
		prefetching := ahead > 0
		c.pools[name] = tasks
		for range q.MaxWorkers {
			go c.workerPool(tasks)
		}
		c.producers[name] = producer.New(producer.Config{
			Queue:        name,
			MaxWorkers:   q.MaxWorkers,
			Prefetch:     ahead,
			AutoPrefetch: q.Prefetch == 0,
			Claim: func(ctx context.Context, limit int) ([]*store.Job, error) {
				return c.claim(ctx, store.ClaimParams{
					Queue: name, Kinds: c.kinds, Limit: limit,
					WorkerID: c.cfg.ID, LeaseDuration: c.cfg.LeaseDuration,
				})
			},
			NextDue: func(ctx context.Context) (time.Time, bool, error) {
				return c.store.NextDue(ctx, name)
			},
			Execute: func(row *store.Job, claimedAt time.Time, release func()) {
				c.execute(row, release, claimedAt.Add(c.cfg.LeaseDuration), prefetching)
			},
			PollInterval: c.cfg.PollInterval,
			Logger:       c.cfg.Logger,
		})
	}
	own := make(map[string]string, len(c.cfg.Queues))
	fingerprint := presence.Fingerprint(c.kinds) // a client claims the same kinds in every queue
	for name := range c.cfg.Queues {
		own[name] = fingerprint
	}
	c.presence = presence.New(c.cfg.ID, own, presenceTTL(c.presenceEvery))
	// Subscribe before the producers' first claim, so nothing inserted after it is missed.
	c.unsubscribe = c.store.Notifier().Subscribe(c.onNotification)
	if c.cfg.Notifier != nil {
		own := c.unsubscribe
		other := c.cfg.Notifier.Subscribe(c.onNotification)
		c.unsubscribe = func() { own(); other() }
	}
	for _, p := range c.producers {
		go p.Run(produceCtx)
	}
	if len(own) > 0 {
		c.presenceDone = make(chan struct{})
		go c.presenceLoop(produceCtx, own)
	}

	c.servicesWG.Add(1)
	go func() {
		defer c.servicesWG.Done()
		c.heartbeatLoop(c.serviceCtx)
	}()
	c.servicesWG.Add(1)
	go func() {
		defer c.servicesWG.Done()
		c.recordLoop(c.serviceCtx) // peers.go: this client in the store's registry, for ClientList
	}()
	c.servicesWG.Add(1)
	go func() {
		defer c.servicesWG.Done()
		c.watchSchema(c.serviceCtx)
	}()

	if !c.cfg.DisableMaintenance {
		c.maintainer = maintenance.New(maintenance.Config{
			Store:              c.store,
			ClientID:           c.cfg.ID,
			LeaderTTL:          c.cfg.LeaderTTL,
			RescueInterval:     c.cfg.RescueInterval,
			CompletedRetention: c.cfg.CompletedRetention,
			CancelledRetention: c.cfg.CancelledRetention,
			DiscardedRetention: c.cfg.DiscardedRetention,
			DiscardedMaxCount:  c.cfg.DiscardedMaxCount,
			CleanupInterval:    c.cleanupEvery,
			Logger:             c.cfg.Logger,
			OnRescue:           c.onRescue,
			OnExpired:          c.onExpired,
			OnPass:             c.onMaintenancePass(),
			OnPrune:            c.onPrune,
			Held:               c.maintenanceHeld,
			DeadLetterQueues:   c.deadLetterQueues,
			FinishedQueues:     c.finishedQueues,
			Archive:            c.archiveDeadLetter(),
			ArchiveAll:         c.cfg.DeadLetterPruningPolicy == PruneArchive,
			Tasks:              c.maintenanceTasks(),
		})
		var maintenanceCtx context.Context
		maintenanceCtx, c.maintenanceCancel = context.WithCancel(c.serviceCtx)
		c.servicesWG.Add(1)
		go func() {
			defer c.servicesWG.Done()
			c.maintainer.Run(maintenanceCtx)
		}()
	}
	c.cfg.Logger.Info("pronto: client started", "client", c.cfg.ID, "queues", len(c.cfg.Queues), "kinds", c.kinds)
	return nil
}

// Stop shuts the client down gracefully: it stops claiming at once, lets running jobs finish until
// ctx's deadline, then cancels them (their context's cause is ErrShutdown) and returns them to
// available without spending an attempt, writes every outstanding outcome, and resigns leadership.
// It returns ctx's error if jobs had to be cancelled.
//
// Stop returns by stopMargin after ctx ends (after the moment given to workers that ignore their
// cancellation), with ctx's error, when the shutdown has not ended by then: a store that does not
// answer (a stopped Redis, a partitioned database) holds the outcomes' writes, the client's record
// and the leader's resignation. They go on in the background, each bounded as it is (the outcomes
// within 10 s), and jobs whose outcome is not written are rescued when their leases expire.
// Calling Stop again waits for the same shutdown, bounded by its own ctx, and returns its result
// (ctx's error if jobs had to be cancelled).
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.stopped = true
	c.mu.Unlock()
	c.commitWatchCancel() // an insert-only client's too
	c.commitWatches.Wait()
	if !started {
		return nil
	}
	c.stopOnce.Do(func() {
		c.stopDone = make(chan struct{})
		go func() {
			defer close(c.stopDone)
			c.stopErr = c.stop(ctx)
		}()
	})
	return c.awaitStop(ctx)
}

// stopMargin is how long Stop waits for the shutdown past its ctx's end (see Stop): enough for a
// store that answers to take the outcomes of the jobs cancelled at the deadline.
const stopMargin = time.Second

// awaitStop waits for the shutdown to end, or until stopMargin after ctx ends and after the
// cancelled jobs' workers had their moment (which the shutdown bounds itself).
func (c *Client) awaitStop(ctx context.Context) error {
	select {
	case <-c.stopDone:
		return c.stopErr
	case <-ctx.Done():
	}
	end := time.Now().Add(stopMargin)
	// Polled: the workers' moment may begin or end while this waits.
	tick := time.NewTicker(stopMargin / 20)
	defer tick.Stop()
	for {
		select {
		case <-c.stopDone:
			return c.stopErr
		case <-tick.C:
		}
		if c.stopWorkers.Load() {
			continue
		}
		if t := c.stopWorkersEnd.Load(); t != 0 {
			end = later(end, time.Unix(0, t).Add(stopMargin))
		}
		if time.Now().After(end) {
			c.cfg.Logger.Warn("pronto: stop: the shutdown did not end by the deadline; it goes on in the background",
				"client", c.cfg.ID)
			return ctx.Err()
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (c *Client) stop(ctx context.Context) error {
	c.produceCancel()
	for _, p := range c.producers {
		<-p.Done()
	}
	if c.presenceDone != nil {
		<-c.presenceDone
		// Tell the other clients at once, so the jobs this one would have claimed go to them.
		gone, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		c.signal(gone, []store.Notification{{Kind: store.NotifyGone, Client: c.cfg.ID}})
		cancel()
	}
	// No claim runs any more: the prefetched jobs that no worker has taken up go back at once.
	c.returnPrefetched()
	var result error
	jobsDone := make(chan struct{})
	go func() { c.jobsWG.Wait(); close(jobsDone) }()
	select {
	case <-jobsDone:
	case <-ctx.Done():
		if c.executing.Load() == 0 {
			// No job runs (those left are returning): nothing is cancelled, so Stop succeeds
			// however done ctx is.
			<-jobsDone
			break
		}
		result = ctx.Err()
		c.stopWorkers.Store(true)
		c.cancelWork(ErrShutdown)
		// Workers that honour their context return at once; give them a moment.
		select {
		case <-jobsDone:
		case <-time.After(2 * time.Second):
			c.abandonStuckJobs()
		}
		c.stopWorkersEnd.Store(time.Now().UnixNano())
		c.stopWorkers.Store(false)
	}
	// Every job has returned (or was abandoned): the pools' goroutines may go.
	for _, tasks := range c.pools {
		tasks.Close()
	}
	c.completer.Close()
	select {
	case <-c.completer.Done():
	case <-time.After(10 * time.Second):
		c.cfg.Logger.Error("pronto: stop: outcomes could not be written in time; their jobs will be rescued when their leases expire")
		c.completerCancel()
		<-c.completer.Done()
	}
	c.serviceCancel()
	if c.unsubscribe != nil {
		c.unsubscribe()
	}
	c.servicesWG.Wait()
	c.completerCancel()
	c.cancelWork(ErrShutdown)
	c.emitWorkerStopped(time.Now())
	c.cfg.Logger.Info("pronto: client stopped", "client", c.cfg.ID)
	return result
}

// returnPrefetched cancels, with ErrShutdown, the runs no worker has started (prefetched, or claimed
// for a worker still recording its previous outcome): each is then given back to available with its
// attempt refunded, without running. The producers have stopped, so once they are cancelled the
// pools' channels hold only such runs: then one more goroutine per pool that had any takes them up,
// so that they go back at once rather than after the running jobs free a worker. (Started before
// the sweep, that goroutine could take up a run not yet cancelled and run it beside the pool's
// MaxWorkers.)
func (c *Client) returnPrefetched() {
	for name := range c.giveBackQueued("", ErrShutdown) {
		go c.workerPool(c.pools[name])
	}
}

// errQueuePaused is the cause of a run given back, before its worker started it, because its queue
// was paused.
var errQueuePaused = errors.New("pronto: queue paused before the job started")

// giveBackQueued cancels with cause the runs of queue (of every queue when queue is "") that no
// worker has started, so that none starts: the worker that takes each up gives it back to available,
// its attempt refunded (see recordOutcome). It returns the queues it gave runs back from.
func (c *Client) giveBackQueued(queue string, cause error) map[string]bool {
	c.runMu.Lock()
	var waiting []context.CancelCauseFunc
	queues := map[string]bool{}
	for _, rj := range c.running {
		if rj.cancel != nil && (queue == "" || rj.row.Queue == queue) && rj.phase.CompareAndSwap(runQueued, runReturned) {
			waiting = append(waiting, rj.cancel)
			queues[rj.row.Queue] = true
		}
	}
	c.runMu.Unlock()
	for _, cancel := range waiting {
		cancel(cause)
	}
	return queues
}

// abandonStuckJobs returns jobs whose workers ignore cancellation to available; their late outcomes
// are not recorded.
func (c *Client) abandonStuckJobs() {
	c.runMu.Lock()
	var stuck []*JobRow
	for _, rj := range c.running {
		if rj.cancel != nil {
			stuck = append(stuck, rj.row)
		}
	}
	c.runMu.Unlock()
	for _, row := range stuck {
		c.cfg.Logger.Warn("pronto: worker ignored cancellation at shutdown; returning its job to available", jobAttrs(row)...)
		c.completer.Add(completer.Item{Completion: store.Completion{
			ID: row.ID, Attempt: row.Attempt, Token: row.ClaimToken, State: store.StateAvailable, RefundAttempt: true,
		}})
	}
}

// onNotification routes one store notification. It runs on the notifier's goroutine and never blocks.
func (c *Client) onNotification(n store.Notification) {
	switch n.Kind {
	case store.NotifyInsert, store.NotifyResume:
		p := c.producers[n.Queue]
		switch {
		case p == nil:
		case !n.DueAt.IsZero():
			p.WakeAt(n.DueAt)
		case n.Nonce != 0:
			c.claimIfOwner(p, n)
		default:
			p.Wake()
		}
	case store.NotifyPresence:
		c.presence.Seen(n.Client, n.Queue, n.Fingerprint, time.Now())
	case store.NotifyGone:
		c.presence.Gone(n.Client)
	case store.NotifyOverflow:
		if p := c.producers[n.Queue]; p != nil && n.Client != c.cfg.ID {
			p.Wake()
		}
	case store.NotifyCancel:
		c.cancelLocal(n.JobID, n.ClaimToken)
	case store.NotifyPause:
		if c.producers[n.Queue] != nil {
			// Jobs claimed ahead of the workers do not start in a paused queue: given back.
			c.giveBackQueued(n.Queue, errQueuePaused)
		}
	case store.NotifyReconnect:
		for _, p := range c.producers {
			p.Wake()
		}
	}
}

// claimIfOwner handles an insert notification that names its claimer by nonce: the owner claims at
// once, the other clients leave the jobs to it. An owner with no free worker asks the others to
// claim instead (an overflow signal), and claims itself as soon as a worker frees.
func (c *Client) claimIfOwner(p *producer.Producer, n store.Notification) {
	mine, peers := c.presence.Owner(n.Queue, n.Nonce, time.Now())
	if !mine || p.Promise() {
		return
	}
	p.Wake()
	if peers > 0 {
		c.overflowMu.Lock()
		c.overflow[n.Queue] = true
		c.overflowMu.Unlock()
		select {
		case c.overflowWake <- struct{}{}:
		default:
		}
	}
}

// presenceInterval is how often a client announces the queues it works.
const presenceInterval = time.Second

// presenceTTL is how long a client counts a peer after its latest announcement: three intervals
// and a half, so one or two lost or late announcements do not drop it.
func presenceTTL(every time.Duration) time.Duration { return every*3 + every/2 }

// presenceLoop announces the queues this client works (own: queue to kinds fingerprint) every
// presenceEvery, and sends the overflow signals claimIfOwner asks for, until ctx ends. Overflow
// requests made while a signal is being sent are sent together next.
func (c *Client) presenceLoop(ctx context.Context, own map[string]string) {
	defer close(c.presenceDone)
	announce := make([]store.Notification, 0, len(own))
	for queue, fp := range own {
		announce = append(announce, store.Notification{Kind: store.NotifyPresence, Client: c.cfg.ID, Queue: queue, Fingerprint: fp})
	}
	t := time.NewTicker(c.presenceEvery)
	defer t.Stop()
	c.signal(ctx, announce)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.signal(ctx, announce)
		case <-c.overflowWake:
			c.overflowMu.Lock()
			ns := make([]store.Notification, 0, len(c.overflow))
			for queue := range c.overflow {
				ns = append(ns, store.Notification{Kind: store.NotifyOverflow, Client: c.cfg.ID, Queue: queue})
			}
			clear(c.overflow)
			c.overflowMu.Unlock()
			c.signal(ctx, ns)
		}
	}
}

// signal sends client signals, logging a failure: a lost announcement costs only some claims
// made twice, or late (at the next poll), never a job.
func (c *Client) signal(ctx context.Context, ns []store.Notification) {
	if err := c.notifier().Signal(ctx, ns); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Warn("pronto: sending client signals failed", "client", c.cfg.ID, "err", err)
	}
}

// heartbeatRenewWithin is how close to its end a job's lease must be for a heartbeat to extend it:
// two intervals (so a lease is extended at least one tick before it could run out, with one
// interval to spare for a slow statement), and at least half the lease.
func heartbeatRenewWithin(lease, interval time.Duration) time.Duration {
	return max(2*interval, lease/2)
}

// heartbeatLoop extends, in one statement per interval, the leases of the jobs this client holds
// that come near their end (see heartbeatRenewWithin), and stops the runs of jobs it no longer
// holds. Jobs that finish well within their first lease, most of them in a busy queue, are never
// part of a heartbeat: a heartbeat locks the rows it extends, and rows it needn't touch are rows
// the completer's Finish never waits for.
func (c *Client) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	within := heartbeatRenewWithin(c.cfg.LeaseDuration, c.cfg.HeartbeatInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		started := time.Now()
		runs := c.runsToRenew(started, within)
		if len(runs) == 0 {
			continue
		}
		ids := make([]string, len(runs))
		tokens := make([]string, len(runs))
		for i, rj := range runs {
			ids[i], tokens[i] = rj.row.ID, rj.row.ClaimToken
		}
		if slices.Contains(tokens, "") {
			tokens = nil // a store without claim tokens: the worker id fences
		}
		lost, err := c.store.Heartbeat(ctx, store.HeartbeatParams{WorkerID: c.cfg.ID, IDs: ids, Tokens: tokens, LeaseDuration: c.cfg.LeaseDuration})
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("pronto: heartbeat failed", "jobs", len(ids), "err", err)
			}
			continue
		}
		gone := make(map[string]struct{}, len(lost))
		for _, id := range lost {
			gone[id] = struct{}{}
		}
		until := started.Add(c.cfg.LeaseDuration)
		var stop []*runningJob
		c.runMu.Lock()
		for _, rj := range runs {
			if _, ok := gone[rj.row.ID]; !ok {
				rj.leaseUntil = until
			} else if rj.cancel != nil {
				stop = append(stop, rj)
			}
		}
		c.runMu.Unlock()
		for _, rj := range stop {
			// Cancelled elsewhere (and the notification was missed), or taken back by the rescuer.
			cause := ErrJobLost
			if j, err := c.store.GetJob(ctx, rj.row.ID); err == nil && j.State == store.StateCancelled {
				cause = ErrJobCancelled
			}
			c.cancelRun(rj, cause)
		}
	}
}

// runsToRenew returns the runs whose leases end within the given time of now: only the newest run
// of each job, since an older one lost its claim when the job was claimed again.
func (c *Client) runsToRenew(now time.Time, within time.Duration) []*runningJob {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	var runs []*runningJob
	for _, rj := range c.latest {
		if rj.leaseUntil.Sub(now) <= within {
			runs = append(runs, rj)
		}
	}
	return runs
}

// cancelLocal cancels, with ErrJobCancelled, this client's run of job id, if it holds one: running
// or prefetched (which then never runs). With a token, only the run under that claim token: one
// not registered yet (claimed, on its way to execute) is remembered, and execute stops it.
//
// A run whose worker returned has nothing left to stop, and the store refuses its outcome: the
// cancel is reported when the refusal comes (Finished), or here if it came first. Either way once,
// however many times the cancel is heard (JobCancel here, then the store's notification).
func (c *Client) cancelLocal(id, token string) {
	c.runMu.Lock()
	var cancel context.CancelCauseFunc
	var refused *refusedRun
	now := time.Now()
	if rj := c.latest[id]; rj != nil && (token == "" || rj.row.ClaimToken == "" || rj.row.ClaimToken == token) {
		cancel = rj.cancel
		rj.cancelHeard = true
	} else if r, ok := c.refused[token]; ok && token != "" && r.row.ID == id {
		delete(c.refused, token)
		refused = &r
	} else {
		c.cancels.Add(id, token, now)
	}
	c.runMu.Unlock()
	if cancel != nil {
		cancel(ErrJobCancelled)
	}
	if refused != nil && now.Sub(refused.at) < cancelset.Kept {
		c.emitCancelledAfterReturn(refused.row, refused.dur, now)
	}
}

// refusedRun is a run whose outcome the store refused, with how long its worker ran, and when.
type refusedRun struct {
	row *JobRow
	dur time.Duration
	at  time.Time
}

// settleRefused forgets rj, whose outcome the store refused, and reports whether a cancel of it
// was heard already; if not, the run is kept in refused for a cancel heard later.
func (c *Client) settleRefused(rj *runningJob, now time.Time) bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	c.forgetLocked(rj)
	if rj.cancelHeard {
		return true
	}
	if c.refused == nil {
		c.refused = make(map[string]refusedRun)
	}
	for k, r := range c.refused {
		if now.Sub(r.at) >= cancelset.Kept {
			delete(c.refused, k)
		}
	}
	c.refused[rj.key] = refusedRun{row: rj.row, dur: rj.out.dur, at: now}
	return false
}

// emitCancelledAfterReturn reports the cancel of row's run that came after its worker returned.
func (c *Client) emitCancelledAfterReturn(row *JobRow, dur time.Duration, now time.Time) {
	out := *row
	out.State, out.WorkerID = store.StateCancelled, ""
	c.events.emit(&Event{Kind: EventCancelled, Job: &out, Err: ErrJobCancelled, Duration: dur, At: now})
}

// cancelRun cancels rj's context with cause unless its worker has already returned.
func (c *Client) cancelRun(rj *runningJob, cause error) {
	c.runMu.Lock()
	cancel := rj.cancel
	c.runMu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

func (c *Client) onRescue(res store.RescueResult) {
	if !c.events.active() {
		return
	}
	now := time.Now()
	for _, j := range res.Requeued {
		c.events.emit(&Event{Kind: EventRescued, Job: j, At: now})
	}
	for _, j := range res.Discarded {
		c.events.emit(&Event{Kind: EventDiscarded, Job: j, Err: errLeaseExpiredDiscarded, At: now})
	}
}

// onHeldBack reports the jobs a claim of this client held back for their rate limit
// (store.ClaimParams.OnHeldBack): EventDiscarded for those it dropped, EventSnoozed for those it
// rescheduled. Neither ran: their events carry no duration.
func (c *Client) onHeldBack(dropped, rescheduled []*store.Job) {
	if !c.events.active() {
		return
	}
	now := time.Now()
	for _, j := range dropped {
		c.events.emit(&Event{Kind: EventDiscarded, Job: j, At: now,
			Err: fmt.Errorf("%w (rate key %s had no room)", ErrRateLimitDropped, j.RateKey)})
	}
	for _, j := range rescheduled {
		c.events.emit(&Event{Kind: EventSnoozed, Job: j, At: now,
			Err: fmt.Errorf("%w (rate key %s had no room)", ErrRateLimitRescheduled, j.RateKey)})
	}
}

// onExpired reports the jobs a pass discarded because their expiry passed before they started.
func (c *Client) onExpired(jobs []*JobRow) {
	if len(jobs) == 0 || !c.events.wants(EventDiscarded) {
		return
	}
	now := time.Now()
	for _, j := range jobs {
		c.events.emit(&Event{Kind: EventDiscarded, Job: j, Err: ErrJobExpired, At: now})
	}
}

// errLeaseExpiredDiscarded is the error of a job the rescuer discarded: its run lost the lease on the
// last attempt allowed. It wraps ErrJobLost so that subscribers can tell it from a worker's error.
var errLeaseExpiredDiscarded = fmt.Errorf("%w: lease expired with no attempts left", ErrJobLost)

type resultKey struct{}

// flushProgress writes the run's pending progress report, if any.
func (h *resultHolder) flushProgress() {
	h.progressOnce.Do(func() {}) // no report from now on makes a throttle
	if h.progress != nil {
		h.progress.end()
	}
}

// resultHolder is what a Work call's context carries of its run: the result recorded so far, and
// whether CompleteTx wrote the run's completion in an application's transaction.
type resultHolder struct {
	client *Client
	run    *runningJob

	mu            sync.Mutex
	raw           json.RawMessage
	completedInTx bool
	// removedInTx says that the completion CompleteTx wrote asked to remove the job
	// (QueueConfig.RemoveCompleted): once its transaction commits the job may be gone.
	removedInTx bool

	// progress throttles the run's ReportProgress writes (made on first use).
	progressOnce sync.Once
	progress     *progressThrottle
}

// RecordResult stores v (as JSON) as the result of the job whose context ctx is; it is saved when the
// attempt completes successfully and returned by JobGet as the job's Result. Call it from Work.
func RecordResult(ctx context.Context, v any) error {
	h, ok := ctx.Value(resultKey{}).(*resultHolder)
	if !ok {
		return errors.New("pronto: RecordResult called outside a job's context")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("pronto: job result does not encode as JSON: %w", err)
	}
	if err := jsoncheck.Check(b, "result"); err != nil { // refused now, not when the outcome is written
		return fmt.Errorf("%w: job result: %w", ErrInvalidArgs, err)
	}
	h.mu.Lock()
	h.raw = b
	h.mu.Unlock()
	return nil
}

// errTimeout is the cause of a job's context when its timeout passes.
var errTimeout = errors.New("pronto: job timeout")

// jobTask is one claimed job handed to a queue's worker pool.
type jobTask struct {
	run *runningJob
	// after, when set, is closed when the superseded run of the same job has returned.
	after   <-chan struct{}
	row     *store.Job
	ctx     context.Context
	cancel  context.CancelCauseFunc
	release func()
}

// workerPool runs a queue's jobs on a fixed set of goroutines (one per worker slot), so their stacks
// stay warm and the goroutine count is bounded by the configured workers.
func (c *Client) workerPool(tasks *fairq.Queue[jobTask]) {
	for {
		t, ok := tasks.Pop()
		if !ok {
			return
		}
		c.run(t)
	}
}

// execute hands one claimed job to its queue's worker pool; release frees its worker slot. The pool
// always has room: a producer claims no more jobs than it has free slots.
// leaseUntil is the client's reckoning of the end of the job's lease.
func (c *Client) execute(row *store.Job, release func(), leaseUntil time.Time, prefetching bool) {
	c.jobsWG.Add(1)
	c.executing.Add(1)
	// The run's context derives from workBase, which is never cancelled, so that it is not one more
	// child in a context shared by every run (a lock and a map entry per run); shutdown cancels the
	// runs through c.running instead (cancelWork), and a run registered after that finds workCtx
	// cancelled below.
	ctx, cancel := context.WithCancelCause(c.workBase)
	rj := &runningJob{key: runKey(row), row: row, cancel: cancel, leaseUntil: leaseUntil}
	if prefetching {
		rj.queuedAt = time.Now()
	}
	rj.holder = resultHolder{client: c, run: rj}
	rj.jctx = jobCtx{Context: ctx, h: &rj.holder}
	c.runMu.Lock()
	var superseded context.CancelCauseFunc
	var after <-chan struct{}
	if old := c.latest[row.ID]; old != nil && old.cancel != nil {
		// The store gave this client the job again while a run of it goes on here: that run's lease
		// lapsed and the rescuer took the job back. It must stop, its outcome is not recorded, and
		// the new run waits for it to return.
		if old.returned == nil {
			old.returned = make(chan struct{})
		}
		superseded, after = old.cancel, old.returned
	}
	c.running[rj.key] = rj
	c.latest[row.ID] = rj
	cancelled := c.cancels.Has(row.ID, row.ClaimToken, time.Now())
	c.runMu.Unlock()
	if c.workCtx.Err() != nil {
		cancel(context.Cause(c.workCtx)) // registered after cancelWork's sweep
	}
	if cancelled {
		cancel(ErrJobCancelled) // cancelled between its claim and now: its worker never runs
	}
	if superseded != nil {
		c.cfg.Logger.Warn("pronto: a job was claimed again while an earlier run of it still ran here; stopping that run",
			jobAttrs(row)...)
		superseded(ErrJobLost)
	}
	c.pools[row.Queue].Push(row.Tenant, jobTask{run: rj, row: row, ctx: ctx, cancel: cancel, release: release, after: after})
}

// cancelWork cancels workCtx and every run's context with cause. A run that execute registers after
// the sweep finds workCtx cancelled.
func (c *Client) cancelWork(cause error) {
	c.workCancel(cause)
	c.runMu.Lock()
	cancels := make([]context.CancelCauseFunc, 0, len(c.running))
	for _, rj := range c.running {
		if rj.cancel != nil {
			cancels = append(cancels, rj.cancel)
		}
	}
	c.runMu.Unlock()
	for _, cancel := range cancels {
		cancel(cause)
	}
}

// runKey identifies one run of a job: its claim token, which every claim draws anew, or, from a
// store without tokens, the job id and attempt.
func runKey(row *JobRow) string {
	if row.ClaimToken != "" {
		return row.ClaimToken
	}
	return row.ID + "#" + strconv.Itoa(row.Attempt)
}

// run works one job to its outcome.
func (c *Client) run(t jobTask) {
	row, ctx, cancel, release := t.row, t.ctx, t.cancel, t.release
	defer c.jobsWG.Done()
	defer c.executing.Add(-1)
	holder := &t.run.holder
	var jobCtx context.Context = &t.run.jctx
	timeout := row.Timeout
	if timeout == 0 {
		timeout = c.cfg.JobTimeout
	}
	var stopTimeout context.CancelFunc = func() {}
	if timeout > 0 {
		jobCtx, stopTimeout = context.WithTimeoutCause(jobCtx, timeout, errTimeout)
	}
	var err error
	if t.after != nil {
		select {
		case <-t.after:
		case <-jobCtx.Done():
		}
	}
	if !t.run.phase.CompareAndSwap(runQueued, runStarted) {
		<-jobCtx.Done() // given back by Stop, whose cancel follows at once
	}
	start := time.Now()
	ran := false
	if jobCtx.Err() != nil {
		// Stopped before its worker started (superseded while waiting for the earlier run, or a
		// prefetched job cancelled, lost or given back by Stop): the worker never runs.
		err = context.Cause(jobCtx)
	} else {
		if !t.run.queuedAt.IsZero() {
			c.emitPrefetchedStarted(row, start.Sub(t.run.queuedAt))
		} else {
			c.emitStarted([]*JobRow{row})
		}
		err = c.runWorker(jobCtx, row)
		ran = true
	}
	dur := time.Since(start)
	if p := c.producers[row.Queue]; ran && p != nil {
		p.ObserveRun(dur) // the run times that size the queue's prefetch (QueueConfig.Prefetch)
	}
	holder.flushProgress() // the latest report is written while the job is still active
	progressed, progressData := holder.progress.reportedProgress()
	timedOut := errors.Is(context.Cause(jobCtx), errTimeout)
	cause := context.Cause(ctx)
	stopTimeout()
	c.runMu.Lock()
	t.run.cancel = nil
	if t.run.returned != nil {
		close(t.run.returned)
	}
	c.runMu.Unlock()
	cancel(nil)
	release()
	holder.mu.Lock()
	result, inTx, removedInTx := holder.raw, holder.completedInTx, holder.removedInTx
	holder.mu.Unlock()
	if inTx && c.settledInTx(t.run, removedInTx) {
		// The application's transaction committed the completion: nothing else is written.
		c.forget(t.run)
		out := *row
		out.State, out.Result, out.WorkerID, out.CompletedAt = store.StateCompleted, result, "", time.Now()
		c.completedRuns.Add(1)
		c.events.emit(&Event{Kind: EventCompleted, Job: &out, Duration: dur, At: out.CompletedAt})
		if progressed {
			c.emitProgressCompleted(&out, progressData, dur, out.CompletedAt)
		}
		return
	}
	c.recordOutcome(t.run, err, result, cause, timedOut, dur, progressed, progressData)
}

// runWorker runs the job's worker through the work middleware, turning panics into errors. A
// worker's panic becomes its *PanicError inside the middleware, so that they see the failure it is
// (a tracing span's status, a log line) rather than unwind past their outcome; a middleware's own
// panic is recovered here too.
func (c *Client) runWorker(ctx context.Context, row *JobRow) (err error) {
	defer c.recoverPanic(ctx, row, &err)
	entry := c.cfg.Workers.byKind[row.Kind]
	if entry == nil {
		// Only kinds with workers are claimed, so this needs a registry changed under our feet.
		return Discard(fmt.Errorf("no worker registered for kind %q on client %s", row.Kind, c.cfg.ID))
	}
	if len(c.work) == 0 {
		return entry.run(ctx, row)
	}
	next := func(ctx context.Context) (err error) {
		defer c.recoverPanic(ctx, row, &err)
		return entry.run(ctx, row)
	}
	for i := len(c.work) - 1; i >= 0; i-- {
		mw, inner := c.work[i], next
		next = func(ctx context.Context) error { return mw(ctx, row, inner) }
	}
	return next(ctx)
}

// recoverPanic, deferred, turns a panic into the *PanicError *err and tells Config.OnPanic.
func (c *Client) recoverPanic(ctx context.Context, row *JobRow, err *error) {
	r := recover()
	if r == nil {
		return
	}
	stack := string(debug.Stack())
	*err = &PanicError{Value: r, Stack: stack}
	if c.cfg.OnPanic != nil {
		c.safeCallback(func() { c.cfg.OnPanic(ctx, row, r, stack) })
	}
}

func (c *Client) safeCallback(f func()) {
	defer func() {
		if r := recover(); r != nil {
			c.cfg.Logger.Error("pronto: error/panic handler panicked", "panic", r)
		}
	}()
	f()
}

// recordOutcome turns an attempt's outcome into a completion and hands it to the completer.
// progressed says whether the attempt reported progress, progressData the last data it reported.
func (c *Client) recordOutcome(rj *runningJob, err error, result json.RawMessage, cause error, timedOut bool, dur time.Duration, progressed bool, progressData json.RawMessage) {
	row := rj.row
	now := time.Now()
	switch {
	case errors.Is(cause, ErrJobCancelled):
		// Already cancelled in the store by whoever cancelled it.
		c.forget(rj)
		out := *row
		out.State = store.StateCancelled
		c.events.emit(&Event{Kind: EventCancelled, Job: &out, Err: ErrJobCancelled, Duration: dur, At: now})
		return
	case errors.Is(cause, ErrJobLost):
		c.forget(rj)
		c.cfg.Logger.Warn("pronto: lost the lease of a running job; its outcome is not recorded", jobAttrs(row)...)
		return
	}

	comp := store.Completion{ID: row.ID, Attempt: row.Attempt, Token: row.ClaimToken}
	var kind EventKind
	switch {
	case err == nil:
		comp.State, comp.Result, kind = store.StateCompleted, result, EventCompleted
		comp.Remove = c.removesCompleted(row.Queue)
	case (errors.Is(cause, ErrShutdown) || errors.Is(cause, errQueuePaused)) && !timedOut:
		// Interrupted by shutdown, or given back unstarted by a pause: back to available at once,
		// the attempt refunded.
		comp.State, comp.RefundAttempt = store.StateAvailable, true
	default:
		kind, err = c.failedOutcome(row, err, &comp, timedOut, dur, now)
	}
	rj.out = pendingOutcome{comp: comp, kind: kind, err: err, dur: dur, now: now, progressed: progressed, progressData: progressData}
	// The run itself is the callback: no closure per outcome.
	// A rate-keyed job's outcome frees room under its key's limit, a tenant's under its tenant's
	// (if it has one: the client does not know), which claims may be waiting for.
	c.completer.Add(completer.Item{Completion: comp, Callback: rj, Prompt: row.RateKey != "" || row.Tenant != ""})
}

// removesCompleted reports whether this client removes the completed jobs of queue
// (Config.RemoveCompleted, QueueConfig.RemoveCompleted).
func (c *Client) removesCompleted(queue string) bool {
	return c.cfg.RemoveCompleted || c.cfg.Queues[queue].RemoveCompleted
}

// failedOutcome fills in comp for an attempt that returned err, and returns the event kind to emit and
// the error as recorded. It is apart from recordOutcome so that a successful attempt does not pay for
// the errors.As targets, which escape to the heap.
func (c *Client) failedOutcome(row *JobRow, err error, comp *store.Completion, timedOut bool, dur time.Duration, now time.Time) (EventKind, error) {
	var kind EventKind
	var snooze *SnoozeError
	var cancelErr *CancelError
	var discard *DiscardError
	switch {
	case errors.As(err, &snooze):
		comp.State, comp.RefundAttempt, kind = store.StateScheduled, true, EventSnoozed
		comp.ScheduledAt = now.Add(snooze.Duration)
	case errors.As(err, &cancelErr):
		comp.State, kind = store.StateCancelled, EventCancelled
		comp.Error = attemptError(row, err, now, false)
	case errors.As(err, &discard):
		comp.State, kind = store.StateDiscarded, EventDiscarded
		comp.Error = attemptError(row, err, now, false)
	default:
		if timedOut {
			err = fmt.Errorf("job timed out after %s: %w", dur.Round(time.Millisecond), err)
		}
		if c.cfg.OnError != nil {
			var pe *PanicError
			if !errors.As(err, &pe) {
				c.safeCallback(func() { c.cfg.OnError(c.workCtx, row, err) })
			}
		}
		policy := c.policyOf(row)
		ae := attemptError(row, err, now, true)
		if timedOut {
			ae.Type = "timeout"
		}
		// Matched as an OJS worker's reported type is (MatchesErrorType), so that one policy's
		// "validation.*" entry means the same for Go and OJS workers.
		retryable := row.Attempt < row.MaxAttempts && !MatchesErrorType(policy.NonRetryableErrors, ae.Type)
		if retryable {
			comp.State, kind = store.StateRetryable, EventFailed
			comp.ScheduledAt = now.Add(policy.Delay(backoffAttempt(row)))
		} else {
			comp.State, kind = store.StateDiscarded, EventDiscarded
			f := false
			ae.Retryable = &f
		}
		comp.Error = ae
	}
	return kind, err
}

// Finished is the completer's callback for the run's outcome (rj.out): applied reports whether the
// store took it, werr why it could not be written.
func (rj *runningJob) Finished(applied bool, werr error) {
	c, row, o := rj.holder.client, rj.row, &rj.out
	if werr != nil {
		c.forget(rj)
		c.cfg.Logger.Warn("pronto: outcome not written; the job will be rescued", jobAttrs(row, "err", werr)...)
		return
	}
	if !applied {
		// Refused: the run lost its claim, maybe to a cancel that came after its worker returned.
		if now := time.Now(); c.settleRefused(rj, now) {
			c.emitCancelledAfterReturn(row, o.dur, now)
		}
		return
	}
	c.forget(rj)
	comp := &o.comp
	if c.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		c.cfg.Logger.Debug("pronto: attempt ended", jobAttrs(row, "state", comp.State, "duration", o.dur, "err", o.err)...)
	}
	if comp.State == store.StateRetryable || comp.State == store.StateScheduled {
		if p := c.producers[row.Queue]; p != nil {
			p.WakeAt(comp.ScheduledAt)
		}
	}
	if o.kind == "" || !c.events.active() {
		return
	}
	out := *row
	out.State = comp.State
	out.Result = comp.Result
	out.WorkerID = ""
	if comp.Error != nil {
		ae := *comp.Error
		ae.StartedAt = row.StartedAt // as the store records it
		out.Errors = append(slices.Clone(row.Errors), ae)
	}
	if comp.RefundAttempt {
		out.MaxAttempts = min(out.MaxAttempts+1, store.MaxAttemptsLimit)
	}
	if !comp.ScheduledAt.IsZero() {
		out.ScheduledAt = comp.ScheduledAt
	}
	if comp.State.Terminal() {
		out.CompletedAt = o.now
	}
	if o.kind == EventCompleted {
		c.completedRuns.Add(1)
	}
	c.events.emit(&Event{Kind: o.kind, Job: &out, Err: o.err, Duration: o.dur, At: o.now})
	if o.kind == EventCompleted && o.progressed {
		c.emitProgressCompleted(&out, o.progressData, o.dur, o.now)
	}
}

// forget drops a run whose outcome is settled (written, refused, or not to be recorded).
func (c *Client) forget(rj *runningJob) {
	c.runMu.Lock()
	c.forgetLocked(rj)
	c.runMu.Unlock()
}

// forgetLocked is forget with runMu held.
func (c *Client) forgetLocked(rj *runningJob) {
	delete(c.running, rj.key)
	if c.latest[rj.row.ID] == rj {
		delete(c.latest, rj.row.ID)
	}
}

// policyOf returns the job's retry policy merged over the client's default.
func (c *Client) policyOf(row *JobRow) RetryPolicy {
	if len(row.RetryPolicy) == 0 || string(row.RetryPolicy) == "null" {
		return c.cfg.RetryPolicy
	}
	var p RetryPolicy
	if err := json.Unmarshal(row.RetryPolicy, &p); err != nil {
		c.cfg.Logger.Warn("pronto: job has an unreadable retry policy; using the default", jobAttrs(row, "err", err)...)
		return c.cfg.RetryPolicy
	}
	return p.withDefaults(c.cfg.RetryPolicy)
}

// backoffAttempt is the attempt number a failed attempt of row backs off from: its attempt, less
// the attempts that ended without an entry in its errors (a worker's Snooze, a prefetched job given
// back unstarted), each of which counted in Attempt. Waiting, then, does not lengthen the retry
// delay: a job that snoozed ten times and fails once waits the policy's first delay, not its
// eleventh. A job retried by hand (attempts reset, errors kept) backs off from its attempt.
func backoffAttempt(row *JobRow) int {
	return max(min(row.Attempt, len(row.Errors)+1), 1)
}

// attemptError describes err as an error-history entry.
func attemptError(row *JobRow, err error, at time.Time, retryable bool) *store.AttemptError {
	// A worker's error text is whatever its code produced: stored faithfully escaped (NUL and invalid
	// UTF-8 made visible), since text no store can hold must never fail the outcome write.
	ae := &store.AttemptError{Attempt: row.Attempt, At: at, Message: jsoncheck.Sanitize(err.Error()),
		Type: jsoncheck.Sanitize(errorType(err))}
	var pe *PanicError
	if errors.As(err, &pe) {
		ae.Type, ae.Trace = "panic", jsoncheck.Sanitize(pe.Stack)
	}
	if !retryable {
		f := false
		ae.Retryable = &f
	}
	return ae
}

// errorType names an error's class for the error history and NonRetryableErrors: the type of the
// innermost error that is not a plain wrapper (fmt.Errorf, Cancel, Discard), as "package.Type" without
// the pointer star (for example "net.OpError", "pronto.SnoozeError"), or "error" for an error with no
// type of its own (errors.New, fmt.Errorf without %w).
func errorType(err error) string {
	for {
		t := strings.TrimPrefix(fmt.Sprintf("%T", err), "*")
		switch t {
		case "fmt.wrapError", "fmt.wrapErrors", "pronto.CancelError", "pronto.DiscardError":
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
				continue
			}
			return "error"
		case "errors.errorString", "errors.joinError", "":
			return "error"
		}
		return t
	}
}
