package pronto

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// QueueConfig configures one queue a client works.
type QueueConfig struct {
	// MaxWorkers is how many of the queue's jobs this client runs at once (default 100).
	MaxWorkers int
	// Prefetch is how many of the queue's jobs this client may claim beyond its free workers, to
	// start each as soon as a worker frees. It takes the claim's round trip off the path between one
	// job and the next, which is what bounds a queue of short jobs.
	//
	// The default, 0, prefetches by itself: as many jobs as the workers finish during one claim's
	// round trip (MaxWorkers × the claim's time ÷ a job's run time, running estimates of this
	// client's), at most AutoPrefetchMax(MaxWorkers). A prefetched job then waits about one claim's
	// round trip, which it would have waited for its own claim, and a queue whose jobs run longer
	// than MaxWorkers claims prefetches nothing. It prefetches only through a backlog (while claims
	// come back full), so a job arriving at a quiet queue goes to a free worker, and not while the
	// claims take jobs of tenants, whose turns it would delay. N > 0 prefetches up to N jobs at any
	// time whatever their run time; NoPrefetch never prefetches: a claim takes only what free
	// workers can run.
	//
	// A prefetched job is claimed: it counts as active (toward rate and tenant limits too), its
	// lease is renewed by this client's heartbeats while it waits, no other client can run it, and
	// its timeout starts only when its worker does. Stop gives the jobs not yet started back at once,
	// their attempt refunded, and a pause of the queue (QueuePause) keeps them from starting and gives
	// them back as its workers free; a process that dies holds them until their leases run out, like its
	// running jobs.
	Prefetch int
	// RemoveCompleted deletes each job of the queue that this client completes as its outcome is
	// written, instead of keeping it completed for CompletedRetention (as BullMQ's
	// removeOnComplete): the job, its result and its progress are then gone from listings, counts
	// and GetJob, as retention cleanup would leave them a day later. It costs the database less
	// than keeping the job: on PostgreSQL a DELETE writes no new row version and no index entries,
	// and the bench's drain ran 15% faster (docs/architecture.md, "Removing completed jobs").
	// Events, metrics and traces still see every completion. Jobs that others read once completed
	// are kept all the same: a workflow's jobs (their children read their results) and unique jobs
	// whose key holds in the completed state. It applies to completions through this client: its
	// workers' outcomes, CompleteTx, and the acknowledgements of OJS workers that go through it.
	// Other outcomes (failed, cancelled, discarded jobs) are kept as usual.
	RemoveCompleted bool
}

// NoPrefetch, as QueueConfig.Prefetch, turns prefetching off.
const NoPrefetch = -1

// AutoPrefetchMax is the most jobs a queue of maxWorkers workers prefetches by itself (Prefetch 0):
// four times its workers, at least 64 and at most 1,000.
func AutoPrefetchMax(maxWorkers int) int {
	return min(max(4*maxWorkers, 64), 1000)
}

// prefetchMax is the most jobs the queue may hold beyond its workers.
func (q QueueConfig) prefetchMax() int {
	switch {
	case q.Prefetch == 0:
		return AutoPrefetchMax(q.MaxWorkers)
	case q.Prefetch < 0:
		return 0
	}
	return q.Prefetch
}

// Config configures a Client. The zero value is valid for an insert-only client; a client that works
// jobs names its Queues and Workers. Every zero duration takes the default given beside it.
type Config struct {
	// ID names this client in leases, leadership and logs (default host-pid-random). Unique per process.
	ID string
	// Queues maps queue names to their settings. Empty: the client inserts and administers but works
	// nothing (it still takes part in maintenance unless DisableMaintenance).
	Queues map[string]QueueConfig
	// Workers holds a worker per kind. The client claims only jobs of kinds it has a worker for: a job
	// of another kind waits (visibly, in its queue) for a client that can work it; it is never dropped.
	Workers *Workers

	// RetryPolicy is the default for jobs that carry none (default DefaultRetryPolicy).
	RetryPolicy RetryPolicy
	// JobTimeout bounds each attempt of jobs without a timeout of their own (default: none).
	JobTimeout time.Duration
	// LeaseDuration is how long a claimed job is held without a heartbeat before the leader rescues it
	// (3 s). With the defaults a SIGKILLed client's jobs are available again within 3.5 s, even when
	// the leader dies with it: see RecoveryBound.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the client extends, in one statement, the leases of its jobs
	// that come near their end: less than two intervals or half the lease left (1 s).
	HeartbeatInterval time.Duration
	// PollInterval is the slow poll that covers lost notifications (1 s). Notifications make pickup
	// immediate; on SQLite shared by several processes, the poll is how other processes find work.
	PollInterval time.Duration
	// RescueInterval is how often the leader looks for expired leases (500 ms). A client that takes
	// office looks at once.
	RescueInterval time.Duration
	// LeaderTTL is how long a leader holds office without renewing (2 s); it renews, and the others
	// try to take office, every LeaderTTL/3.
	LeaderTTL time.Duration
	// Retention of terminal jobs: completed and cancelled 24 h, discarded 7 days. Negative keeps forever.
	CompletedRetention time.Duration
	CancelledRetention time.Duration
	DiscardedRetention time.Duration
	// RemoveCompleted, as QueueConfig.RemoveCompleted, for the completions of every queue through
	// this client, those it works and those of OJS workers it serves (`pronto serve
	// --remove-completed`); a queue's own setting can only add to it.
	RemoveCompleted bool
	// DiscardedMaxCount bounds the dead letter queue by count (ojs-dead-letter.md 5, max_count): the
	// leader keeps the newest this many discarded jobs of the store and deletes older ones beyond
	// them, with EventDeadLetterPruned (10000; negative: no count bound). Every pronto store
	// implements it (store.DiscardedPruner); a store that does not is bounded by age only. Queues
	// given a retention of their own (Client.DeadLetterRetentionsSet) are bounded by it instead and
	// left out of this count and of DiscardedRetention.
	DiscardedMaxCount int
	// DeadLetterArchive, if set, keeps the dead letter jobs that pruning removes from queues whose
	// pruning policy is PruneArchive (ojs-dead-letter.md 8.2): the leader hands each batch to it and
	// deletes the jobs only once it has returned nil. See DeadLetterArchive.
	DeadLetterArchive DeadLetterArchive
	// DeadLetterPruningPolicy is the pruning policy of the queues without a retention of their own
	// (PruneDelete when empty). PruneArchive needs DeadLetterArchive.
	DeadLetterPruningPolicy PruningPolicy
	// DisableMaintenance keeps this client out of leader election (it never rescues or cleans).
	DisableMaintenance bool
	// MaxArgsBytes bounds a job's encoded args (1 MiB).
	MaxArgsBytes int
	// MaxMetaBytes bounds a job's meta encoded as compact JSON (DefaultMaxMetaBytes, 64 KiB, the
	// OJS limit; the HTTP server holds its clients to that default).
	MaxMetaBytes int
	// CompleterBatchSize bounds how many outcomes one statement writes (1000).
	CompleterBatchSize int
	// CompleterLinger is how long outcomes wait for company before they are written, while they
	// arrive closer together than that (20 ms): at a few hundred jobs a second each statement then
	// writes several outcomes instead of one (about six at 300 jobs/s).
	// A lone outcome is written at once, and a worker's slot is free as soon as it returns; the
	// linger only delays when an outcome (and what it releases: workflow children, unique keys)
	// becomes visible in the store. Negative writes every outcome at once.
	CompleterLinger time.Duration
	// ProgressStallTimeout, when positive, is how long an active job that reported progress may go
	// without another report before this client emits EventProgressStalled for it (once per
	// silence; a later report re-arms it). It watches the jobs this client's workers run and those
	// whose OJS workers report progress through it (PUT /ojs/v1/jobs/{id}/progress). 0: off.
	ProgressStallTimeout time.Duration
	// SystemHook, when set, observes this client's housekeeping passes: promotion, rescue and
	// retention cleanup while it leads, and each cron occurrence RunCron handles (see SystemOp;
	// otelpronto's Tracing.SystemHook traces them).
	SystemHook SystemHook
	// NoisyNeighbors, when set, has the client that leads maintenance check the tenants for noisy
	// neighbours every NoisyNeighbors.Interval (ojs-multi-tenancy.md §9) and, with Throttle, lower a
	// noisy tenant's weight for a while (see NoisyNeighborConfig, docs/fair-scheduling.md). Nil: off.
	NoisyNeighbors *NoisyNeighborConfig

	// Notifier, when set, carries notifications between this process and the others that set one
	// on the same channel, for a store whose own notifications do not reach them: SQLite shared by
	// several processes, or PostgreSQL behind a pooler that cannot LISTEN (see Notifier). The client
	// forwards its store's inserts, cancellations, pauses and resumes (on PostgreSQL, whose store
	// hears even its own through LISTEN, the jobs this client inserts) from NewClient on, and works
	// with what the other processes send as with its store's own notifications: an insert in one
	// process wakes a worker in another at once instead of at its next poll. Leave it nil where the
	// store's notifications already reach every process (PostgreSQL with LISTEN, Redis): everything
	// would arrive twice. The forwarding lasts as long as the store: make one client per store and
	// process with a Notifier.
	Notifier Notifier

	// Logger receives the client's structured logs (default: discarded).
	Logger *slog.Logger
	// OnError is called after an attempt fails with an error (not a panic).
	OnError func(ctx context.Context, job *JobRow, err error)
	// OnPanic is called after a worker panics, with the recovered value and the stack.
	OnPanic func(ctx context.Context, job *JobRow, value any, stack string)

	// InsertBatchSize bounds how many concurrent single-job inserts (Insert, or InsertMany, InsertRaw
	// or InsertOJS of one job, outside an application transaction) one store write merges
	// (DefaultInsertBatchSize).
	// While a write is in flight, the single-job inserts that arrive meanwhile are written together
	// in the next, each caller still getting its own job or error; a lone insert is written at once.
	// 1 writes every insert on its own, as does the memory store always (its inserts have no round
	// trip to save).
	InsertBatchSize int
	// FetchBatchSize bounds how many jobs concurrent remote fetches of one queue (RemoteFetch, and
	// so the HTTP API's fetch) share in one store claim, and how many concurrent remote outcomes
	// (RemoteAck, RemoteNack) share one store write (DefaultFetchBatchSize). While claims of a
	// queue are in flight, the fetches that arrive meanwhile share the next, each job recorded under
	// the worker it goes to; a lone fetch claims at once. Likewise for outcomes, each caller told
	// whether its own was applied. 1 claims and finishes every call on its own, as does the memory
	// store always.
	FetchBatchSize int

	// InsertMiddleware wraps every insert, outermost first.
	InsertMiddleware []InsertMiddleware
	// WorkMiddleware wraps every attempt, outermost first.
	WorkMiddleware []WorkMiddleware
}

// Defaults.
const (
	DefaultMaxWorkers        = 100
	DefaultLeaseDuration     = 3 * time.Second
	DefaultHeartbeatInterval = time.Second
	DefaultPollInterval      = time.Second
	DefaultMaxArgsBytes      = 1 << 20
	DefaultInsertBatchSize   = 500
	DefaultFetchBatchSize    = 1000
	DefaultRescueInterval    = 500 * time.Millisecond
	DefaultLeaderTTL         = 2 * time.Second
)

// RecoveryBound is the longest time, with this configuration (zero durations read as their
// defaults), from the death of a client process (SIGKILL, power loss) to its jobs being available
// again, when the maintenance leader dies at the same moment (or is that process):
//
//   - a job's lease ends at most LeaseDuration after the death (a claim or heartbeat sets it to
//     LeaseDuration from then), and the leader's next rescue comes within RescueInterval after that;
//   - the dead leader's office lapses at most LeaderTTL after its last renewal; a surviving client
//     tries every LeaderTTL/3, so it takes office within LeaderTTL + LeaderTTL/3, and rescues at once.
//
// Both run at the same time, so the bound is the larger: max(LeaseDuration + RescueInterval,
// LeaderTTL + LeaderTTL/3), 3.5 s with the defaults. A client picks the jobs up at once when the
// rescue announces their queue (PostgreSQL, or one process); on SQLite shared by several processes,
// within PollInterval more. A leader that dies some time d after the worker, before rescuing its
// jobs, makes it max(LeaseDuration + RescueInterval, d + LeaderTTL + LeaderTTL/3).
func (c Config) RecoveryBound() time.Duration {
	lease := orDefault(c.LeaseDuration, DefaultLeaseDuration)
	rescue := orDefault(c.RescueInterval, DefaultRescueInterval)
	ttl := orDefault(c.LeaderTTL, DefaultLeaderTTL)
	return max(lease+rescue, ttl+ttl/3)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (c Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	// A negative interval would reach time.NewTicker in a goroutine and crash the process.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"LeaseDuration", c.LeaseDuration}, {"HeartbeatInterval", c.HeartbeatInterval}, {"PollInterval", c.PollInterval},
		{"RescueInterval", c.RescueInterval}, {"LeaderTTL", c.LeaderTTL}, {"JobTimeout", c.JobTimeout}} {
		if d.v < 0 {
			return c, fmt.Errorf("pronto: config: %s (%s) is negative", d.name, d.v)
		}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuidv7.New()[24:])
	}
	def(&c.LeaseDuration, DefaultLeaseDuration)
	def(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.RescueInterval, DefaultRescueInterval)
	def(&c.LeaderTTL, DefaultLeaderTTL)
	if c.MaxArgsBytes <= 0 {
		c.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if c.MaxMetaBytes <= 0 {
		c.MaxMetaBytes = DefaultMaxMetaBytes
	}
	if c.InsertBatchSize < 0 {
		return c, fmt.Errorf("pronto: config: InsertBatchSize %d is negative", c.InsertBatchSize)
	}
	if c.FetchBatchSize < 0 {
		return c, fmt.Errorf("pronto: config: FetchBatchSize %d is negative", c.FetchBatchSize)
	}
	if c.FetchBatchSize == 0 {
		c.FetchBatchSize = DefaultFetchBatchSize
	}
	if c.InsertBatchSize == 0 {
		c.InsertBatchSize = DefaultInsertBatchSize
	}
	c.RetryPolicy = c.RetryPolicy.withDefaults(DefaultRetryPolicy)
	if err := c.RetryPolicy.Validate(); err != nil {
		return c, fmt.Errorf("pronto: config: %w", err)
	}
	if c.HeartbeatInterval >= c.LeaseDuration {
		return c, fmt.Errorf("pronto: config: HeartbeatInterval (%s) must be shorter than LeaseDuration (%s)", c.HeartbeatInterval, c.LeaseDuration)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.Queues) > 0 && (c.Workers == nil || len(c.Workers.byKind) == 0) {
		return c, fmt.Errorf("pronto: config: queues are configured but no workers are registered")
	}
	queues := make(map[string]QueueConfig, len(c.Queues))
	for name, q := range c.Queues {
		if !ValidQueueName(name) {
			return c, fmt.Errorf("pronto: config: %w", invalidf("queue name %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", name))
		}
		if q.MaxWorkers == 0 {
			q.MaxWorkers = DefaultMaxWorkers
		}
		if q.MaxWorkers < 0 {
			return c, fmt.Errorf("pronto: config: queue %q: MaxWorkers %d is negative", name, q.MaxWorkers)
		}
		if q.Prefetch < NoPrefetch {
			return c, fmt.Errorf("pronto: config: queue %q: Prefetch %d is negative (NoPrefetch, -1, turns it off)", name, q.Prefetch)
		}
		queues[name] = q
	}
	c.Queues = queues
	if err := c.DeadLetterPruningPolicy.check(c.DeadLetterArchive != nil); err != nil {
		return c, fmt.Errorf("pronto: config: DeadLetterPruningPolicy: %w", err)
	}
	if c.NoisyNeighbors != nil {
		nn, err := c.NoisyNeighbors.withDefaults()
		if err != nil {
			return c, fmt.Errorf("pronto: %w", err)
		}
		c.NoisyNeighbors = &nn
	}
	return c, nil
}
