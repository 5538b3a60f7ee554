// Package maintenance runs the cluster's housekeeping on the one client elected leader of its store:
// the rescuer (expired leases back to available, or discarded when attempts are spent), the promoter
// (due scheduled and retryable jobs shown as available; held in maintenance mode), the expirer (jobs
// past expires_at discarded) and the retention cleaner, and the leader-only tasks the client adds
// (Config.Tasks: the noisy-neighbour checks). Leadership is a row in the store with a TTL that the leader renews; when
// the leader dies another client takes over within one TTL.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/internal/skewclock"
	"github.com/pronto-jobs/pronto/store"
)

// LeaderName is the leadership row maintenance elects on.
const LeaderName = "maintenance"

// Config configures the maintenance loop. Zero durations take the defaults in the comments.
type Config struct {
	Store    store.Store
	ClientID string
	// LeaderTTL is how long a leader holds office without renewing (2 s); it renews every TTL/3.
	LeaderTTL time.Duration
	// RescueInterval is how often expired leases are looked for (500 ms), and once more the moment this
	// client takes office: a successor to a dead leader rescues without waiting for its next tick.
	RescueInterval time.Duration
	// PromoteInterval is how often due jobs are promoted and expired jobs discarded (1 s).
	PromoteInterval time.Duration
	// CleanupInterval is how often old terminal jobs are deleted (30 s).
	CleanupInterval time.Duration
	// Retention per terminal state (24 h, 24 h, 7 days). Negative: keep forever.
	CompletedRetention time.Duration
	CancelledRetention time.Duration
	DiscardedRetention time.Duration
	// DiscardedMaxCount bounds the discarded jobs kept, over the whole store: the oldest beyond it
	// are deleted (10000; negative: no count bound). Stores without store.DiscardedPruner ignore it.
	DiscardedMaxCount int
	// BatchSize bounds each statement (1000).
	BatchSize int
	Logger    *slog.Logger
	// OnRescue, OnExpired and OnLeadership, if set, observe what happens (events, tests). OnExpired
	// gets the jobs a promote pass discarded because their expiry passed.
	OnRescue     func(store.RescueResult)
	OnExpired    func([]*store.Job)
	OnLeadership func(leader bool)
	// OnPass, if set, is called as each pass starts (op: OpPromote, OpRescue or OpCleanup) and
	// returns the context the pass runs in and a function called when it ends, with the number of
	// jobs it moved or deleted and its error (tracing).
	OnPass func(ctx context.Context, op string) (context.Context, func(n int, err error))
	// OnPrune, if set, is told how many discarded jobs each cleanup pass deleted per queue (by age
	// or count), on stores with store.DiscardedPruner, and whether Archive had them first.
	OnPrune func(perQueue map[string]int, archived bool)
	// Archive, if set, keeps the discarded jobs of queues whose pruning policy is archive
	// (ojs-dead-letter.md 8.2) before they are deleted: only the jobs of a call that returned nil
	// are deleted, and only if they are still discarded as read (store.DiscardedArchiver).
	Archive func(ctx context.Context, jobs []*store.Job) error
	// ArchiveAll makes archive the pruning policy of the queues without a retention of their own.
	ArchiveAll bool
	// DeadLetterQueues, if set, returns the queues whose discarded jobs have bounds of their own
	// (ojs-dead-letter.md 5.3), read at each cleanup pass: they are pruned by those, and left out of
	// DiscardedRetention and DiscardedMaxCount. Stores without store.DiscardedPruner ignore it.
	DeadLetterQueues func(ctx context.Context) (map[string]QueueRetention, error)
	// FinishedQueues, if set, returns the queues whose completed and cancelled jobs have retention
	// times of their own (ojs-admin-api.md 6.6), read at each cleanup pass: they are cleaned by
	// those (zero: CompletedRetention or CancelledRetention), and left out of the shared pass.
	FinishedQueues func(ctx context.Context) (map[string]FinishedRetention, error)
	// Held, if set, is asked before each promotion pass: while it reports true (maintenance mode,
	// ojs-admin-api.md 12.1) due scheduled and retryable jobs stay as they are. Expired jobs are
	// still discarded: they can never run, held or not.
	Held func(ctx context.Context) bool
	// Tasks are further cluster-wide periodic work, each run every Interval while this client leads
	// (never two runs of one task at once, and never on a client that does not lead).
	Tasks []Task
}

// QueueRetention bounds one queue's discarded jobs: those discarded more than MaxAge ago, and the
// oldest beyond the newest MaxCount, are deleted. Zero is no bound of that kind.
type QueueRetention struct {
	MaxAge   time.Duration
	MaxCount int
	// Archive: the jobs go to Config.Archive before they are deleted.
	Archive bool
}

// FinishedRetention is one queue's retention of its completed and cancelled jobs; zero follows the
// client's, negative keeps forever.
type FinishedRetention struct {
	Completed, Cancelled time.Duration
}

// Task is periodic work done by the leader only.
type Task struct {
	// Name names the task in logs.
	Name string
	// Interval is how often it runs while this client leads (at least 10 ms).
	Interval time.Duration
	// Run does the work; it should return soon after ctx is done.
	Run func(ctx context.Context)
}

// The passes Config.OnPass is told about.
const (
	OpPromote = "promote" // due scheduled and retryable jobs made available, expired jobs discarded
	OpRescue  = "rescue"  // expired leases back to available (or discarded)
	OpCleanup = "cleanup" // terminal jobs past their retention deleted
)

// pass starts a pass for OnPass; the returned function ends it.
func (m *Maintainer) pass(ctx context.Context, op string) (context.Context, func(n int, err error)) {
	if m.cfg.OnPass == nil {
		return ctx, func(int, error) {}
	}
	return m.cfg.OnPass(ctx, op)
}

// Maintainer runs the loop.
type Maintainer struct {
	cfg    Config
	leader atomic.Bool
	done   chan struct{}
	// deleted counts the jobs this client's cleanup passes deleted (see Deleted).
	deleted atomic.Int64
}

// Deleted returns how many jobs this client's retention cleanup and dead letter pruning have
// deleted so far: a task comparing job counts over time can tell whether deletions came between.
func (m *Maintainer) Deleted() int64 { return m.deleted.Load() }

// New applies defaults and returns a Maintainer; Run starts it.
func New(cfg Config) *Maintainer {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.LeaderTTL, 2*time.Second)
	def(&cfg.RescueInterval, 500*time.Millisecond)
	def(&cfg.PromoteInterval, time.Second)
	def(&cfg.CleanupInterval, 30*time.Second)
	def(&cfg.CompletedRetention, 24*time.Hour)
	def(&cfg.CancelledRetention, 24*time.Hour)
	def(&cfg.DiscardedRetention, 7*24*time.Hour)
	if cfg.DiscardedMaxCount == 0 {
		cfg.DiscardedMaxCount = 10000
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Maintainer{cfg: cfg, done: make(chan struct{})}
}

// IsLeader reports whether this client leads now.
func (m *Maintainer) IsLeader() bool { return m.leader.Load() }

// Done is closed when Run has returned.
func (m *Maintainer) Done() <-chan struct{} { return m.done }

// Run elects and, while leader, maintains, until ctx is done; then it resigns.
func (m *Maintainer) Run(ctx context.Context) {
	defer close(m.done)
	c := m.cfg
	elect := time.NewTicker(c.LeaderTTL / 3)
	defer elect.Stop()
	rescue := time.NewTicker(c.RescueInterval)
	defer rescue.Stop()
	promote := time.NewTicker(c.PromoteInterval)
	defer promote.Stop()
	cleanup := time.NewTicker(c.CleanupInterval)
	defer cleanup.Stop()

	var tasks sync.WaitGroup
	defer tasks.Wait()
	for _, t := range c.Tasks {
		tasks.Add(1)
		go func() {
			defer tasks.Done()
			m.runTask(ctx, t)
		}()
	}

	if m.elect(ctx) {
		m.rescue(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			// Resign even when not leading as far as we know: a cancellation that lands during an
			// election loses its answer (setLeader(false)) while the row may have become ours, and
			// the next leader would wait out its TTL. A resign names our id, so it releases no
			// other client's leadership.
			wasLeader := m.leader.Load()
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := c.Store.Resign(rctx, LeaderName, c.ClientID); err != nil && wasLeader {
				c.Logger.Warn("pronto: resign leadership", "err", err)
			}
			cancel()
			m.setLeader(false)
			return
		case <-elect.C:
			if m.elect(ctx) {
				m.rescue(ctx) // a new leader: its predecessor may have died with jobs on expired leases
			}
		case <-rescue.C:
			if m.leader.Load() {
				m.rescue(ctx)
			}
		case <-promote.C:
			if m.leader.Load() {
				m.promote(ctx)
			}
		case <-cleanup.C:
			if m.leader.Load() {
				m.cleanup(ctx)
			}
		}
	}
}

// runTask runs t every t.Interval while this client leads, until ctx is done.
func (m *Maintainer) runTask(ctx context.Context, t Task) {
	tick := time.NewTicker(max(t.Interval, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if m.leader.Load() {
				t.Run(ctx)
			}
		}
	}
}

// setLeader records whether this client leads, and reports whether it just took office.
func (m *Maintainer) setLeader(v bool) (tookOffice bool) {
	if m.leader.Swap(v) != v {
		m.cfg.Logger.Info("pronto: maintenance leadership changed", "client", m.cfg.ClientID, "leader", v)
		if m.cfg.OnLeadership != nil {
			m.cfg.OnLeadership(v)
		}
		return v
	}
	return false
}

// elect takes or renews office, and reports whether this client just took it.
func (m *Maintainer) elect(ctx context.Context) bool {
	ok, err := m.cfg.Store.Elect(ctx, LeaderName, m.cfg.ClientID, m.cfg.LeaderTTL)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("pronto: leader election failed", "err", err)
		}
		// Without a renewal we cannot know we still lead: step down to be safe.
		m.setLeader(false)
		return false
	}
	return m.setLeader(ok)
}

func (m *Maintainer) rescue(ctx context.Context) {
	ctx, end := m.pass(ctx, OpRescue)
	total := 0
	var failed error
	defer func() { end(total, failed) }()
	for ctx.Err() == nil {
		res, err := m.cfg.Store.Rescue(ctx, store.RescueParams{Limit: m.cfg.BatchSize})
		if err != nil {
			failed = err
			if ctx.Err() == nil {
				m.cfg.Logger.Warn("pronto: rescue failed", "err", err)
			}
			return
		}
		n := len(res.Requeued) + len(res.Discarded)
		total += n
		if n > 0 {
			m.cfg.Logger.Info("pronto: rescued jobs with expired leases", "requeued", len(res.Requeued), "discarded", len(res.Discarded))
			if m.cfg.OnRescue != nil {
				m.cfg.OnRescue(res)
			}
		}
		if n < m.cfg.BatchSize {
			return
		}
	}
}

func (m *Maintainer) promote(ctx context.Context) {
	ctx, end := m.pass(ctx, OpPromote)
	promoted, perr := 0, error(nil)
	if m.cfg.Held == nil || !m.cfg.Held(ctx) {
		promoted, perr = m.cfg.Store.Promote(ctx, m.cfg.BatchSize)
		if perr != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("pronto: promote due jobs failed", "err", perr)
		}
	}
	expired, eerr := m.cfg.Store.DiscardExpired(ctx, m.cfg.BatchSize)
	if eerr != nil && ctx.Err() == nil {
		m.cfg.Logger.Warn("pronto: discard expired jobs failed", "err", eerr)
	}
	if len(expired) > 0 && m.cfg.OnExpired != nil {
		m.cfg.OnExpired(expired)
	}
	end(promoted+len(expired), errors.Join(perr, eerr))
}

// prunePass is one of a cleanup's dead letter passes: its bounds, and whether its jobs are
// archived before they are deleted.
type prunePass struct {
	store.PruneParams
	archive bool
}

// pruneDeadLetter prunes the discarded jobs: each queue with a retention of its own
// (Config.DeadLetterQueues) by its bounds, the others together by base's. It returns how many it
// deleted. When the queues' retentions cannot be read, nothing is pruned: the global bounds could
// delete what a queue keeps longer. A pass that cannot archive what its policy says to archive
// deletes nothing.
func (m *Maintainer) pruneDeadLetter(ctx context.Context, pruner store.DiscardedPruner, base store.PruneParams, now time.Time) (int, error) {
	var own map[string]QueueRetention
	if m.cfg.DeadLetterQueues != nil {
		var err error
		if own, err = m.cfg.DeadLetterQueues(ctx); err != nil {
			return 0, fmt.Errorf("reading the queues' dead-letter retention: %w", err)
		}
	}
	passes := make([]prunePass, 0, len(own)+1)
	for _, q := range slices.Sorted(maps.Keys(own)) {
		r := own[q]
		pp := store.PruneParams{Keep: max(r.MaxCount, 0), Limit: base.Limit, Queues: []string{q}}
		if r.MaxAge > 0 {
			pp.Before = now.Add(-r.MaxAge)
		}
		passes = append(passes, prunePass{pp, r.Archive})
		base.SkipQueues = append(base.SkipQueues, q)
	}
	passes = append(passes, prunePass{base, m.cfg.ArchiveAll})
	total := 0
	var failed error
	for _, pp := range passes {
		if pp.Before.IsZero() && pp.Keep <= 0 {
			continue
		}
		pruned := map[string]int{}
		n, err := m.prunePass(ctx, pruner, pp, pruned)
		total += n
		if len(pruned) > 0 {
			m.cfg.Logger.Info("pronto: pruned discarded jobs", "per_queue", pruned, "archived", pp.archive)
			if m.cfg.OnPrune != nil {
				m.cfg.OnPrune(pruned, pp.archive)
			}
		}
		if err != nil {
			// The next pass covers other queues: one that cannot archive holds back no other.
			failed = errors.Join(failed, err)
		}
	}
	return total, failed
}

// prunePass runs one pass in batches of its Limit until a batch comes short, counting what it
// deleted per queue in pruned.
func (m *Maintainer) prunePass(ctx context.Context, pruner store.DiscardedPruner, pp prunePass, pruned map[string]int) (int, error) {
	archiver, twoSteps := pruner.(store.DiscardedArchiver)
	if pp.archive && (m.cfg.Archive == nil || !twoSteps) {
		return 0, fmt.Errorf("the dead letter of %s is to be archived before pruning, and this client has no archive (Config.DeadLetterArchive) or its store cannot archive: nothing pruned",
			passQueues(pp.PruneParams))
	}
	total := 0
	for ctx.Err() == nil {
		var got map[string]int
		var err error
		batch := 0
		if pp.archive {
			got, batch, err = m.archiveBatch(ctx, archiver, pp.PruneParams)
		} else {
			got, err = pruner.PruneDiscarded(ctx, pp.PruneParams)
		}
		n := 0
		for q, k := range got {
			pruned[q] += k
			n += k
		}
		total += n
		if err != nil {
			return total, err
		}
		if !pp.archive {
			batch = n
		}
		if batch < pp.Limit || n == 0 {
			break
		}
	}
	return total, nil
}

// archiveBatch archives one batch of pp's jobs and deletes those still discarded as archived. It
// returns what it deleted per queue and how many jobs it read.
func (m *Maintainer) archiveBatch(ctx context.Context, archiver store.DiscardedArchiver, pp store.PruneParams) (map[string]int, int, error) {
	jobs, err := archiver.PruneCandidates(ctx, pp)
	if err != nil || len(jobs) == 0 {
		return nil, 0, err
	}
	if err := m.cfg.Archive(ctx, jobs); err != nil {
		return nil, len(jobs), fmt.Errorf("archiving %d discarded jobs of %s: %w (nothing deleted)", len(jobs), passQueues(pp), err)
	}
	got, err := archiver.DeleteDiscarded(ctx, jobs)
	return got, len(jobs), err
}

// passQueues names the queues a pass covers, for errors.
func passQueues(pp store.PruneParams) string {
	if len(pp.Queues) > 0 {
		return "queue " + strings.Join(pp.Queues, ", ")
	}
	return "the queues without a retention of their own"
}

// storeClock is implemented by the stores that several processes share (PostgreSQL's now(), Redis's
// TIME), whose clock stamped the finish times that retention compares with its cut-offs.
type storeClock interface {
	StoreNow(ctx context.Context) (time.Time, error)
}

// storeNow is the time retention counts back from: the store's clock when it has one every
// process shares, so that a leader whose own clock runs an hour ahead does not delete finished
// jobs an hour before their retention ends (nor one behind keep them an hour longer); else this
// process's.
func (m *Maintainer) storeNow(ctx context.Context) (time.Time, error) {
	if sc, ok := m.cfg.Store.(storeClock); ok {
		now, err := sc.StoreNow(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("reading the store's clock: %w", err)
		}
		return now, nil
	}
	return m.processNow(), nil
}

// processClock is this process's clock (time.Now); a test can put it off for one leader
// (export_clockskew_test.go) to play a process whose machine's clock is wrong.
var processClock skewclock.Clock[*Maintainer]

// processNow is this process's clock, as a test may have put it off (processClock).
func (m *Maintainer) processNow() time.Time { return processClock.Now(m) }

func (m *Maintainer) cleanup(ctx context.Context) {
	ctx, end := m.pass(ctx, OpCleanup)
	total := 0
	var failed error
	defer func() {
		m.deleted.Add(int64(total))
		end(total, failed)
	}()
	now, err := m.storeNow(ctx)
	if err != nil {
		failed = err
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("pronto: retention cleanup skipped", "err", err)
		}
		return
	}
	p := store.CleanupParams{
		CompletedBefore: cutoff(0, m.cfg.CompletedRetention, now),
		CancelledBefore: cutoff(0, m.cfg.CancelledRetention, now),
		DiscardedBefore: cutoff(0, m.cfg.DiscardedRetention, now),
		Limit:           m.cfg.BatchSize,
	}
	if pruner, prunes := m.cfg.Store.(store.DiscardedPruner); prunes {
		// The dead letter queue is pruned by age and count together, so that the pass can say
		// which queues lost jobs (dead_letter.pruned).
		pp := store.PruneParams{Before: p.DiscardedBefore, Keep: max(m.cfg.DiscardedMaxCount, 0), Limit: m.cfg.BatchSize}
		p.DiscardedBefore = time.Time{}
		n, err := m.pruneDeadLetter(ctx, pruner, pp, now)
		total += n
		if err != nil {
			failed = err
			if ctx.Err() == nil {
				m.cfg.Logger.Warn("pronto: pruning discarded jobs failed", "err", err)
			}
		}
	}
	passes := []store.CleanupParams{p}
	if m.cfg.FinishedQueues != nil {
		own, err := m.cfg.FinishedQueues(ctx)
		if err != nil {
			// The shared bounds could delete what a queue keeps longer: clean nothing this time.
			failed = fmt.Errorf("reading the queues' retention: %w", err)
			if ctx.Err() == nil {
				m.cfg.Logger.Warn("pronto: retention cleanup skipped", "err", failed)
			}
			return
		}
		passes = passes[:0]
		for _, q := range slices.Sorted(maps.Keys(own)) {
			r := own[q]
			passes = append(passes, store.CleanupParams{
				CompletedBefore: cutoff(r.Completed, m.cfg.CompletedRetention, now),
				CancelledBefore: cutoff(r.Cancelled, m.cfg.CancelledRetention, now),
				DiscardedBefore: p.DiscardedBefore, // zero when the dead letter is pruned above
				Limit:           p.Limit, Queues: []string{q},
			})
			p.SkipQueues = append(p.SkipQueues, q)
		}
		passes = append(passes, p)
	}
	for _, pass := range passes {
		for ctx.Err() == nil {
			n, err := m.cfg.Store.Cleanup(ctx, pass)
			total += n
			if err != nil {
				failed = err
				if ctx.Err() == nil {
					m.cfg.Logger.Warn("pronto: retention cleanup failed", "err", err)
				}
				return
			}
			if n < pass.Limit {
				break
			}
		}
	}
}

// cutoff is the time before which a queue's finished jobs go: by its own retention when set, else
// by the client's; zero (keep) when the one that applies is negative.
func cutoff(own, shared time.Duration, now time.Time) time.Time {
	d := shared
	if own != 0 {
		d = own
	}
	if d < 0 {
		return time.Time{}
	}
	return now.Add(-d)
}
