// Package memory is an in-process store.Store with no dependencies and no persistence: jobs live in
// the memory of the process that created the Store, and everything (jobs, queue pause flags,
// leadership) is lost when that process exits. Use it in tests, and in programs that want pronto's
// job runner without a database and can afford to lose unfinished jobs on exit.
//
// Several clients in one process may share one Store, exactly as several processes share a
// PostgreSQL database; notifications reach every subscriber in the process.
//
// Finished jobs (completed, cancelled and discarded) are kept up to a bound, the newest
// DefaultMaxFinished (10,000) unless WithMaxFinished says otherwise: as jobs finish beyond it, the
// oldest finished jobs are deleted, as retention would delete them. Memory then stays bounded by the
// jobs not yet finished plus the bound, whatever the retention.
//
// The store keeps one mutex. Claimable jobs sit in per-queue, per-kind heaps keyed on (priority
// descending, due time, id), so a claim of k jobs costs O(k log n) whatever the queue's size;
// scheduled and retryable jobs, leases and expiries each have a heap of their own and finished jobs a
// FIFO in finishing order, so every maintenance pass touches only the jobs it changes. Entries are
// removed lazily and the structures compacted when stale entries outnumber live ones.
//
// Available jobs with a rate key sit in heaps of their own per queue, kind and key, so a claim that
// meets an exhausted key drops that whole heap from its candidates instead of stepping over its jobs
// one by one; jobs without a rate key never meet the feature. Unique keys are a map from key to the
// job that last took it, checked under the mutex. A workflow job links to its parents and children,
// and every transition to a terminal state queues the job so that the same critical section decides
// its pending children (see settle).
//
// Every job handed out (by Insert, Claim, GetJob and the rest) is a deep copy: changing it, or the
// parameters given to Insert, never changes what the store holds.
package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/internal/notifyhub"
	"github.com/pronto-jobs/pronto/store"
)

// defaultLimit bounds a maintenance pass (Rescue, Promote, DiscardExpired, Cleanup) when the caller
// gives no positive limit, and defaultListLimit is the ListJobs page size in that case; both match
// the PostgreSQL store.
const (
	defaultLimit     = 1000
	defaultListLimit = 100
)

// Compile-time checks that Store implements the store interfaces.
var (
	_ store.Store       = (*Store)(nil)
	_ store.RateLimiter = (*Store)(nil)
	_ store.Workflows   = (*Store)(nil)
)

// stateIndex numbers the eight states for the per-queue counters, in store.AllStates order.
func stateIndex(s store.State) int {
	switch s {
	case store.StateScheduled:
		return 0
	case store.StateAvailable:
		return 1
	case store.StatePending:
		return 2
	case store.StateActive:
		return 3
	case store.StateCompleted:
		return 4
	case store.StateRetryable:
		return 5
	case store.StateCancelled:
		return 6
	case store.StateDiscarded:
		return 7
	}
	panic("memory: unknown state " + string(s))
}

// job is a stored job and where it is filed.
type job struct {
	store.Job
	q   *queue
	key idKey // sort key of the id
	// gen counts the job's state changes; entries made before the latest are stale.
	gen uint32
	// heap or fifo holds the job's live primary entry (neither for pending jobs, and for available
	// jobs a claim found expired); inExpiry says whether Store.expiry holds a live entry of it.
	heap     *jheap
	fifo     *fifo
	inExpiry bool
	// rk is the bookkeeping of the job's rate key (nil without one).
	rk *rateKey
	// node is the job's place in its workflow's graph (nil outside a workflow). It is a pointer so
	// that jobs outside workflows, nearly all of them, stay small.
	node *node
	// prog is the latest progress a run of the job reported (nil: none).
	prog *store.Progress
}

// entry returns a live entry of j with the given keys.
func (j *job) entry(k1, k2 int64) entry {
	return entry{k1: k1, k2: k2, id: j.key, j: j, gen: j.gen}
}

// queue holds one queue's claimable and waiting jobs, its pause flag and its counts per state.
type queue struct {
	name   string
	paused bool
	// ready holds the queue's available jobs without a rate key by kind, in claim order: keyed on
	// (^priority, due time, id). An available job whose expiry has passed is dropped from it by the
	// claim that meets it and waits for DiscardExpired.
	ready map[string]*jheap
	// limited holds the available jobs with a rate key the same way, by kind and then by key, so that
	// all the jobs of one heap are held back together when their key is exhausted.
	limited map[string]map[string]*jheap
	// waiting holds scheduled and retryable jobs by (due time, id).
	waiting jheap
	counts  [8]int64
	// fair holds the available jobs with a tenant and without a rate key (nil until the queue's
	// first one): see fair.go.
	fair *tenantRing
}

func (q *queue) total() int64 {
	var n int64
	for _, c := range q.counts {
		n += c
	}
	return n
}

// leader is the holder of one leadership name.
type leader struct {
	id    string
	until time.Time
}

// Store is an in-memory store.Store. Everything it holds is lost when the process exits. The zero
// value is not usable; call New. Its methods are safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	jobs   map[string]*job
	queues map[string]*queue
	// ids lists job ids in ascending order for ListJobs. Deleted ids stay until a compaction; an id
	// whose job is not in jobs is skipped.
	ids      []string
	leases   jheap   // active jobs by lease end
	expiry   jheap   // not-started jobs with an expiry, by expiry
	terminal [3]fifo // completed, cancelled and discarded jobs in the order they finished
	leaders  map[string]leader
	// workers are the OJS worker records (workers.go), under a lock of their own.
	workers workerRegistry

	// unique maps a unique key to the job that took it last: the only job that may hold it.
	unique map[string]*job
	// rates holds the rate keys that have a stored limit or stored jobs.
	rates     map[string]*rateKey
	workflows map[string]*workflow
	// tenants holds the tenants with a stored weight or stored jobs (nil until the first): see
	// tenant.go.
	tenants map[string]*tenantStat
	// tenantIDs lists each tenant's job ids in ascending order, for ListJobs with a tenant (see
	// tenantIDList); nil until the first job with a tenant.
	tenantIDs map[string]*idList
	// decided lists workflow jobs that became terminal and whose children settle has not looked at.
	decided []*job

	hub notifyhub.Hub

	// clients is the registry of live clients (clients.go), under its own lock.
	clients clientRegistry

	// claims numbers the claims of jobs, for their claim tokens: unique for the store's life, which
	// is all a token must be here (nothing survives the process to be claimed again).
	claims uint64

	// sideMu guards the tables of cron.go, backpressure.go and schema.go, each made on first use and
	// locked on its own. They are fields, not package-level maps keyed by the Store, so that a Store
	// nobody references any more is garbage, jobs and all.
	sideMu  sync.Mutex
	cronT   *cronTable
	boundT  *boundTable
	schemaT *schemaTable

	// maxFinished bounds the finished jobs kept (0: no bound); dropped counts those deleted to keep
	// within it.
	maxFinished int
	dropped     int64
}

// DefaultMaxFinished is how many finished jobs (completed, cancelled and discarded, together) a Store
// keeps unless WithMaxFinished says otherwise. A finished job costs about 1 KB, so the default holds
// the store's history to about 10 MB however many jobs pass through it.
const DefaultMaxFinished = 10_000

// Option configures New.
type Option func(*Store)

// WithMaxFinished bounds the finished jobs (completed, cancelled and discarded, together) the store
// keeps to the newest n by finish time: whenever a job's finish would make more, the oldest finished
// jobs are deleted in the same critical section, as retention (Cleanup) would delete them, unique keys
// and workflow bookkeeping included. Zero or negative keeps every finished job until Cleanup removes
// it (the pronto client's retention deletes completed jobs after 24 h by default), so memory grows with
// the number of jobs finished in that time. Jobs that are not finished are never dropped, nor is a
// finished workflow job a pending job still waits for (its result is that job's input), so a long
// workflow may keep more than n until it moves on.
func WithMaxFinished(n int) Option {
	return func(s *Store) { s.maxFinished = max(n, 0) }
}

// New returns an empty in-memory store, ready to use (Migrate is not needed). Nothing it holds
// survives the process. It keeps at most DefaultMaxFinished finished jobs unless WithMaxFinished
// says otherwise.
func New(opts ...Option) *Store {
	s := &Store{
		jobs:        make(map[string]*job),
		queues:      make(map[string]*queue),
		leaders:     make(map[string]leader),
		unique:      make(map[string]*job),
		rates:       make(map[string]*rateKey),
		workflows:   make(map[string]*workflow),
		maxFinished: DefaultMaxFinished,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// DroppedFinished returns how many finished jobs the store has deleted so far to keep within its
// bound (WithMaxFinished). Jobs removed by Cleanup or DeleteJob are not counted.
func (s *Store) DroppedFinished() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// trimFinished deletes the oldest finished jobs while more than s.maxFinished are kept; s.mu must be
// held and no workflow job may wait on s.decided (settle calls it last).
func (s *Store) trimFinished() {
	for s.terminal[0].size()+s.terminal[1].size()+s.terminal[2].size() > s.maxFinished {
		j := s.oldestDroppable()
		if j == nil {
			return // every finished job left is one a pending workflow job waits for
		}
		s.unplace(j)
		s.forget(j)
		s.dropped++
	}
}

// oldestDroppable returns the finished job that finished first among those no pending workflow job
// waits for (as Cleanup keeps those, however old), or nil. It looks past the front of a list only
// when the front is waited for.
func (s *Store) oldestDroppable() *job {
	var oldest *job
	for i := range s.terminal {
		f := &s.terminal[i]
		if f.front() == nil { // also drops the stale entries before the first live one
			continue
		}
		for k := f.head; k < len(f.items); k++ {
			e := &f.items[k]
			if !e.live() || s.waited(e.j) {
				continue
			}
			if oldest == nil || e.j.CompletedAt.Before(oldest.CompletedAt) {
				oldest = e.j
			}
			break
		}
	}
	return oldest
}

// Migrate does nothing: an in-memory store has no schema.
func (s *Store) Migrate(ctx context.Context) error { return ctx.Err() }

// Close releases the store's cron schedules. Its jobs stay in memory until the store is garbage.
func (s *Store) Close() error {
	s.sideMu.Lock()
	s.cronT = nil
	s.sideMu.Unlock()
	return nil
}

// Notifier returns the store's in-process notification hub.
func (s *Store) Notifier() store.Notifier { return &s.hub }

// publish delivers notifications; call it without holding s.mu, so subscribers may call the store.
func (s *Store) publish(ns []store.Notification) {
	for _, n := range ns {
		s.hub.Publish(n)
	}
}

// queue returns the named queue, creating it; s.mu must be held.
func (s *Store) queue(name string) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{name: name, ready: make(map[string]*jheap), limited: make(map[string]map[string]*jheap)}
		s.queues[name] = q
	}
	return q
}

func terminalIndex(st store.State) int {
	switch st {
	case store.StateCompleted:
		return 0
	case store.StateCancelled:
		return 1
	}
	return 2
}

// notStarted reports whether a job in state st waits to run (so its expiry applies).
func notStarted(st store.State) bool {
	switch st {
	case store.StateScheduled, store.StateAvailable, store.StatePending, store.StateRetryable:
		return true
	}
	return false
}

func expired(j *job, now time.Time) bool {
	return !j.ExpiresAt.IsZero() && !j.ExpiresAt.After(now)
}

// place files j in the structures its state calls for; s.mu must be held and j must be unplaced.
func (s *Store) place(j *job) {
	if j.UniqueKey != "" {
		s.meetHolder(j)
	}
	q := j.q
	i := stateIndex(j.State)
	q.counts[i]++
	if j.rk != nil {
		j.rk.counts[i]++
	}
	if j.Tenant != "" {
		s.countTenant(j.Tenant, i, 1)
	}
	if j.node != nil {
		j.node.wf.placed(j)
	}
	switch j.State {
	case store.StateAvailable:
		h := q.readyHeap(j)
		h.push(j.entry(^int64(j.Priority), nanos(j.ScheduledAt)))
		j.heap = h
	case store.StateScheduled, store.StateRetryable:
		q.waiting.push(j.entry(nanos(j.ScheduledAt), 0))
		j.heap = &q.waiting
	case store.StateActive:
		s.leases.push(j.entry(nanos(j.LeaseExpiresAt), 0))
		j.heap = &s.leases
	case store.StateCompleted, store.StateCancelled, store.StateDiscarded:
		f := &s.terminal[terminalIndex(j.State)]
		f.push(j.entry(0, 0))
		j.fifo = f
		if j.node != nil && len(j.node.children) > 0 {
			s.decided = append(s.decided, j)
		}
	}
	if !j.ExpiresAt.IsZero() && notStarted(j.State) {
		s.expiry.push(j.entry(nanos(j.ExpiresAt), 0))
		j.inExpiry = true
	}
}

// unplace takes j out of every structure place put it in (its entries go stale); s.mu must be held.
// A caller that has just popped one of j's entries clears the matching field first.
func (s *Store) unplace(j *job) {
	i := stateIndex(j.State)
	j.q.counts[i]--
	if j.rk != nil {
		j.rk.counts[i]--
	}
	if j.Tenant != "" {
		s.countTenant(j.Tenant, i, -1)
	}
	if j.node != nil {
		j.node.wf.unplaced(j)
	}
	j.gen++
	if j.heap != nil {
		j.heap.retire()
		j.heap = nil
	}
	if j.fifo != nil {
		j.fifo.retire()
		j.fifo = nil
	}
	if j.inExpiry {
		s.expiry.retire()
		j.inExpiry = false
	}
}

// addID records a new id in the ordered id list; s.mu must be held.
func (s *Store) addID(id string) {
	n := len(s.ids)
	if n == 0 || s.ids[n-1] < id {
		s.ids = append(s.ids, id)
		return
	}
	i, found := slices.BinarySearch(s.ids, id)
	if found {
		return // the id of a deleted job, reused
	}
	s.ids = slices.Insert(s.ids, i, id)
}

// readyHeap returns the heap of q that holds j while it is available, creating it.
func (q *queue) readyHeap(j *job) *jheap {
	if j.rk == nil && j.Tenant != "" {
		return q.tenantHeap(j)
	}
	if j.rk == nil {
		h := q.ready[j.Kind]
		if h == nil {
			h = &jheap{}
			q.ready[j.Kind] = h
		}
		return h
	}
	byKey := q.limited[j.Kind]
	if byKey == nil {
		byKey = make(map[string]*jheap)
		q.limited[j.Kind] = byKey
	}
	h := byKey[j.RateKey]
	if h == nil {
		h = &jheap{}
		byKey[j.RateKey] = h
	}
	return h
}

// forget deletes j; s.mu must be held and j unplaced.
func (s *Store) forget(j *job) {
	delete(s.jobs, j.ID)
	if j.UniqueKey != "" && s.unique[j.UniqueKey] == j {
		delete(s.unique, j.UniqueKey)
	}
	if j.rk != nil {
		s.dropRateKeyIfUnused(j.rk)
	}
	if j.node != nil {
		s.forgetMember(j)
	}
	if j.Tenant != "" {
		s.forgetTenantID(j.Tenant)
	}
	if dead := len(s.ids) - len(s.jobs); dead > 1024 && dead > len(s.jobs) {
		live := s.ids[:0]
		for _, id := range s.ids {
			if s.jobs[id] != nil {
				live = append(live, id)
			}
		}
		clear(s.ids[len(live):])
		s.ids = live
	}
}

// announcer gathers NotifyInsert notifications, one per queue.
type announcer struct {
	now time.Time
	ns  []store.Notification
	// dropped and rescheduled are the jobs a claim held back for their rate limit (holdBack), as
	// they now are, for store.ClaimParams.OnHeldBack.
	dropped, rescheduled []*store.Job
	// limited are the rate keys whose limit had no room for a job the claim would have taken, for
	// store.ClaimParams.OnLimited; gathered only when wantLimited (someone listens).
	limited     []store.LimitHit
	wantLimited bool
}

// add announces j's queue: due now (DueAt zero) if j is claimable now, else at j's due time.
func (a *announcer) add(j *job) {
	var due time.Time
	if j.State != store.StateAvailable && j.ScheduledAt.After(a.now) {
		due = j.ScheduledAt
	}
	a.addQueue(j.Queue, due)
}

// addQueue announces queue with jobs due at due (zero: now).
func (a *announcer) addQueue(queue string, due time.Time) {
	for i := range a.ns {
		n := &a.ns[i]
		if n.Queue == queue {
			if !n.DueAt.IsZero() && (due.IsZero() || due.Before(n.DueAt)) {
				n.DueAt = due
			}
			return
		}
	}
	a.ns = append(a.ns, store.Notification{Kind: store.NotifyInsert, Queue: queue, DueAt: due})
}

// announces reports whether a job in state st is announced: it is claimable now or later.
func announces(st store.State) bool {
	switch st {
	case store.StateAvailable, store.StateScheduled, store.StateRetryable:
		return true
	}
	return false
}

// Insert stores jobs atomically and announces each queue that got claimable or scheduled jobs. An id
// that exists already (or twice in params) fails the call with store.ErrDuplicate; a state other than
// available, scheduled or pending, a missing id, kind or queue, or a workflow field fails it with
// store.ErrInvalidParams; a unique key held by another job fails it with a
// *store.UniqueConflictError when the job's policy is to reject. Whenever the call fails, nothing is
// stored.
func (s *Store) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, p := range params {
		if err := validInsert(p); err != nil {
			return nil, err
		}
		if err := store.ValidatePlainInsert(p); err != nil {
			return nil, fmt.Errorf("memory: insert: %w", err)
		}
		if err := validUnique(p); err != nil {
			return nil, err
		}
	}
	if err := uniqueIDs(params); err != nil {
		return nil, err
	}
	jobs := make([]*job, len(params))
	for i, p := range params {
		jobs[i] = newJob(p)
	}

	s.mu.Lock()
	now := time.Now() // under the mutex: a replaced job's finish time orders the terminal FIFO
	for _, p := range params {
		if s.jobs[p.ID] != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("memory: insert job %s: %w", p.ID, store.ErrDuplicate)
		}
	}
	for _, j := range jobs {
		j.CreatedAt = now
		if j.ScheduledAt.IsZero() {
			j.ScheduledAt = now
		}
	}
	plan, err := s.planUnique(jobs, params, now)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	a := announcer{now: now}
	cancels := s.applyUnique(plan, now)
	for i, j := range jobs {
		if plan.duplicateOf(i) != nil {
			continue
		}
		if l := params[i].RateLimit; l != nil {
			s.rateKey(j.RateKey).setLimit(*l)
		}
		s.add(j)
		if announces(j.State) {
			a.add(j)
		}
	}
	out := make([]*store.Job, len(params))
	for i, j := range jobs {
		if d := plan.duplicateOf(i); d != nil {
			out[i] = d.export()
			out[i].Duplicate = true
			continue
		}
		out[i] = j.export()
		out[i].Replaced = plan.cancelledBy(i)
	}
	s.settle(now, &a)
	s.mu.Unlock()
	s.publish(cancels)
	s.publish(a.ns)
	return out, nil
}

// add stores and files a new job; s.mu must be held.
func (s *Store) add(j *job) {
	j.q = s.queue(j.Queue)
	if j.RateKey != "" {
		j.rk = s.rateKey(j.RateKey)
	}
	if j.UniqueKey != "" {
		s.unique[j.UniqueKey] = j
	}
	s.jobs[j.ID] = j
	s.addID(j.ID)
	if j.Tenant != "" {
		s.addTenantID(j.Tenant, j.ID)
	}
	s.place(j)
}

// uniqueIDs refuses a batch that names one id twice. Ids made by one process are increasing, which
// proves them distinct without a set.
func uniqueIDs(params []*store.InsertParams) error {
	increasing := true
	for i := 1; i < len(params) && increasing; i++ {
		increasing = params[i-1].ID < params[i].ID
	}
	if increasing {
		return nil
	}
	seen := make(map[string]struct{}, len(params))
	for _, p := range params {
		if _, dup := seen[p.ID]; dup {
			return fmt.Errorf("memory: insert job %s twice in one batch: %w", p.ID, store.ErrDuplicate)
		}
		seen[p.ID] = struct{}{}
	}
	return nil
}

func validInsert(p *store.InsertParams) error {
	if p == nil {
		return fmt.Errorf("memory: insert: nil job: %w", store.ErrInvalidParams)
	}
	switch {
	case p.ID == "":
		return fmt.Errorf("memory: insert: job has no id: %w", store.ErrInvalidParams)
	case p.Kind == "":
		return fmt.Errorf("memory: insert job %s: no kind: %w", p.ID, store.ErrInvalidParams)
	case p.Queue == "":
		return fmt.Errorf("memory: insert job %s: no queue: %w", p.ID, store.ErrInvalidParams)
	}
	switch p.State {
	case store.StateAvailable, store.StateScheduled, store.StatePending:
	default:
		return fmt.Errorf("memory: insert job %s: state %q cannot be inserted (want available, scheduled or pending): %w",
			p.ID, p.State, store.ErrInvalidParams)
	}
	if p.RateLimit != nil {
		if p.RateKey == "" {
			return fmt.Errorf("memory: insert job %s: a rate limit without a rate key: %w", p.ID, store.ErrInvalidParams)
		}
		if err := validLimit(*p.RateLimit); err != nil {
			return fmt.Errorf("memory: insert job %s: %w", p.ID, err)
		}
	}
	return nil
}

// newJob copies p into a new job the store owns.
func newJob(p *store.InsertParams) *job {
	j := &job{key: makeIDKey(p.ID)}
	j.ID = p.ID
	j.Kind = p.Kind
	j.Queue = p.Queue
	j.Args = cloneRaw(p.Args)
	j.Meta = cloneRaw(p.Meta)
	j.Priority = p.Priority
	j.State = p.State
	j.MaxAttempts = p.MaxAttempts
	j.RetryPolicy = cloneRaw(p.RetryPolicy)
	j.Timeout = p.Timeout
	j.Tags = slices.Clone(p.Tags)
	j.ScheduledAt = p.ScheduledAt
	j.ExpiresAt = p.ExpiresAt
	j.UniqueKey = p.UniqueKey
	j.UniqueUntil = p.UniqueUntil
	j.UniqueStates = slices.Clone(p.UniqueStates)
	if j.UniqueKey != "" && len(j.UniqueStates) == 0 {
		// The job reports the states it actually holds its key in.
		j.UniqueStates = slices.Clone(store.DefaultUniqueStates)
	}
	j.Tenant = p.Tenant
	j.RateKey = p.RateKey
	j.WorkflowID = p.WorkflowID
	j.ParentIDs = slices.Clone(p.ParentIDs)
	j.RunOn = p.RunOn
	return j
}

// Claim moves up to p.Limit claimable jobs of p.Queue to active and returns them in claim order.
// Scheduled and retryable jobs of the queue that are due become available on the way (as a Promote
// would make them), so the claim can weigh them against available jobs by priority. A job whose rate
// key is exhausted is skipped (with its whole heap when its limit waits) or dropped or rescheduled as
// its limit says.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.Limit = p.SlotLimit()
	if p.Limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	now := time.Now() // under the mutex: a dropped job's finish time orders the terminal FIFO
	q := s.queues[p.Queue]
	if q == nil || q.paused {
		s.mu.Unlock()
		return nil, nil
	}
	s.promoteQueue(q, now, -1, nil)

	var buf [8]*jheap
	hs := buf[:0]
	if len(p.Kinds) == 0 {
		for _, h := range q.ready {
			if h.len() > 0 {
				hs = append(hs, h)
			}
		}
	} else {
		for _, k := range p.Kinds {
			if h := q.ready[k]; h != nil && h.len() > 0 && !slices.Contains(hs, h) {
				hs = append(hs, h)
			}
		}
	}
	if len(q.limited) > 0 {
		hs = q.limitedCandidates(p.Kinds, hs)
	}
	sel := newSelector(hs)
	fair := q.fairActive()
	if sel.empty() && !fair {
		s.mu.Unlock()
		return nil, nil
	}
	lease := now.Add(p.LeaseDuration)
	a := announcer{now: now, wantLimited: p.OnLimited != nil}
	var aside tenantAside
	out := make([]*store.Job, 0, min(p.Limit, int(q.counts[stateIndex(store.StateAvailable)])))
	if fair {
		out = s.claimFair(q, p, &sel, now, lease, &a, &aside, out)
	}
	for !fair && len(out) < p.Limit {
		bi, top := -1, (*entry)(nil)
		if sel.ordered {
			bi, top = sel.best()
		} else {
			// The common case, a few kinds: scanned inline.
			for i, h := range sel.hs {
				if e := h.top(); e != nil && (top == nil || e.less(top)) {
					bi, top = i, e
				}
			}
		}
		if top == nil {
			break
		}
		best, j := sel.hs[bi], top.j
		if s.passOver(&sel, bi, j, now, &a, &aside) {
			continue
		}
		best.pop()
		j.heap = nil // its entry is gone, not stale
		sel.fix(bi)
		if expired(j, now) {
			// Not claimable, ever: it stays available until DiscardExpired discards it.
			continue
		}
		out = append(out, s.activate(j, p.WorkerFor(len(out)), now, lease))
	}
	aside.restore()
	if p.OnLimited != nil {
		a.limited = s.spentKeys(q, p.Kinds, out, a.limited, now)
	}
	s.settle(now, &a)
	s.mu.Unlock()
	s.publish(a.ns)
	p.ReportHeldBack(a.dropped, a.rescheduled)
	p.ReportLimited(a.limited)
	return out, nil
}

// limitedCandidates appends to hs the rate-key heaps of q that hold available jobs of the given kinds
// (every kind when kinds is empty), and forgets the rate-key heaps it finds empty (no job refers to a
// heap without a live entry of it); s.mu must be held.
func (q *queue) limitedCandidates(kinds []string, hs []*jheap) []*jheap {
	if len(kinds) == 0 {
		for kind := range q.limited {
			hs = q.limitedOfKind(kind, hs)
		}
		return hs
	}
	for i, k := range kinds {
		if !slices.Contains(kinds[:i], k) {
			hs = q.limitedOfKind(k, hs)
		}
	}
	return hs
}

// limitedOfKind is limitedCandidates for one kind.
func (q *queue) limitedOfKind(kind string, hs []*jheap) []*jheap {
	byKey := q.limited[kind]
	for key, h := range byKey {
		if h.top() == nil {
			delete(byKey, key)
			continue
		}
		hs = append(hs, h)
	}
	if byKey != nil && len(byKey) == 0 {
		delete(q.limited, kind)
	}
	return hs
}

// holdBack applies the OnLimit of j's exhausted key to j, the top of its heap: a dropped job is
// discarded, a rescheduled one moved to scheduled at until (or a second from now when until is
// zero). It reports false, leaving j as it is, when the limit waits. The jobs it drops or
// reschedules are listed in a, for the claim's store.ClaimParams.OnHeldBack. s.mu must be held.
func (s *Store) holdBack(j *job, until, now time.Time, a *announcer) bool {
	action := j.rk.limit.OnLimit
	if action != store.LimitDrop && action != store.LimitReschedule {
		return false
	}
	j.heap.pop()
	j.heap = nil
	s.unplace(j)
	if action == store.LimitDrop {
		j.State = store.StateDiscarded
		j.CompletedAt = now
		j.Errors = append(j.Errors, store.AttemptError{
			Attempt: j.Attempt, At: now, Type: "rate_limited",
			Message: fmt.Sprintf("dropped: the limit of rate key %s was exhausted", j.RateKey),
		})
		s.place(j)
		a.dropped = append(a.dropped, j.export())
		return true
	}
	if until.IsZero() {
		until = now.Add(time.Second)
	}
	j.State = store.StateScheduled
	j.ScheduledAt = until
	s.place(j)
	a.add(j)
	a.rescheduled = append(a.rescheduled, j.export())
	return true
}

// promoteQueue makes up to limit (all when negative) due scheduled and retryable jobs of q available,
// announcing q through a when a is not nil, and returns how many it moved; s.mu must be held.
func (s *Store) promoteQueue(q *queue, now time.Time, limit int, a *announcer) int {
	n := 0
	due := nanos(now)
	for n != limit {
		e := q.waiting.top()
		if e == nil || e.k1 > due {
			break
		}
		j := e.j
		q.waiting.pop()
		j.heap = nil
		s.unplace(j)
		j.State = store.StateAvailable
		s.place(j)
		if a != nil {
			a.add(j)
		}
		n++
	}
	return n
}

// validFinish lists the states a Completion may move a job to.
// Finish applies completions to jobs still active in the same attempt and reports which it applied.
// A completion to any other state than completed, retryable, scheduled, discarded, cancelled or
// available fails the whole call before anything is applied.
func (s *Store) Finish(ctx context.Context, completions []store.Completion) ([]store.FinishResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range completions {
		if !c.State.Finishable() {
			return nil, fmt.Errorf("memory: finish job %s: cannot move an active job to state %q", c.ID, c.State)
		}
	}
	res := make([]store.FinishResult, len(completions))
	s.mu.Lock()
	now := time.Now() // under the mutex: finish times grow in the order jobs finish
	a := announcer{now: now}
	for i := range completions {
		c := &completions[i]
		res[i].ID = c.ID
		j := s.jobs[c.ID]
		if j == nil || j.State != store.StateActive || j.Attempt != c.Attempt ||
			(c.Token != "" && j.ClaimToken != c.Token) {
			continue
		}
		res[i].Applied = true
		s.unplace(j)
		if removable(c, j) {
			s.forget(j)
			if s.freesLimit(j) {
				a.addQueue(j.Queue, time.Time{}) // its limit has room for one more job
			}
			continue
		}
		j.State = c.State
		switch c.State {
		case store.StateCompleted:
			j.CompletedAt = now
			j.Result = cloneRaw(c.Result)
		case store.StateDiscarded, store.StateCancelled:
			j.CompletedAt = now
		case store.StateRetryable, store.StateScheduled:
			j.ScheduledAt = c.ScheduledAt
			if j.ScheduledAt.IsZero() {
				j.ScheduledAt = now
			}
		case store.StateAvailable:
			j.ScheduledAt = now
		}
		j.LeaseExpiresAt = time.Time{}
		j.WorkerID = ""
		if c.Error != nil {
			ae := cloneError(*c.Error)
			ae.StartedAt = j.StartedAt
			j.Errors = append(j.Errors, ae)
		}
		if c.RefundAttempt {
			j.MaxAttempts = min(j.MaxAttempts+1, store.MaxAttemptsLimit)
		}
		s.place(j)
		switch {
		case announces(c.State):
			a.add(j)
		case s.freesLimit(j):
			a.addQueue(j.Queue, time.Time{}) // its limit has room for one more job
		}
	}
	s.settle(now, &a)
	s.mu.Unlock()
	s.publish(a.ns)
	return res, nil
}

// removable reports whether completion c deletes job j (store.Completion.Remove): a completed job
// outside any workflow whose unique key, if any, does not hold in the completed state.
func removable(c *store.Completion, j *job) bool {
	return c.Remove && c.State == store.StateCompleted && j.WorkflowID == "" &&
		(j.UniqueKey == "" || !slices.Contains(j.UniqueStates, store.StateCompleted))
}

// Heartbeat extends the leases of the listed jobs that are active and held by p.WorkerID, and
// returns the others.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var lost []string
	lease := time.Now().Add(p.LeaseDuration)
	s.mu.Lock()
	for i, id := range p.IDs {
		j := s.jobs[id]
		if j == nil || j.State != store.StateActive || j.WorkerID != p.WorkerID ||
			(i < len(p.Tokens) && j.ClaimToken != p.Tokens[i]) {
			lost = append(lost, id)
			continue
		}
		j.LeaseExpiresAt = lease
		j.gen++ // an active job's one entry is its lease's
		s.leases.retire()
		s.leases.push(j.entry(nanos(lease), 0))
	}
	s.mu.Unlock()
	return lost, nil
}

// Rescue takes back up to p.Limit active jobs whose lease has run out: to available with an error
// entry of type "lease_expired", or to discarded when their attempts are spent.
func (s *Store) Rescue(ctx context.Context, p store.RescueParams) (store.RescueResult, error) {
	var res store.RescueResult
	if err := ctx.Err(); err != nil {
		return res, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	s.mu.Lock()
	now := time.Now()
	a := announcer{now: now}
	for n, cut := 0, nanos(now); n < limit; n++ {
		e := s.leases.top()
		if e == nil || e.k1 >= cut {
			break
		}
		j := e.j
		s.leases.pop()
		j.heap = nil
		s.unplace(j)
		j.Errors = append(j.Errors, store.AttemptError{
			Attempt:   j.Attempt,
			At:        now,
			StartedAt: j.StartedAt,
			Type:      "lease_expired",
			Message:   fmt.Sprintf("lease expired: worker %s stopped heartbeating", j.WorkerID),
		})
		j.LeaseExpiresAt = time.Time{}
		j.WorkerID = ""
		if j.Attempt >= j.MaxAttempts {
			j.State = store.StateDiscarded
			j.CompletedAt = now
			s.place(j)
			res.Discarded = append(res.Discarded, j.export())
		} else {
			j.State = store.StateAvailable
			j.ScheduledAt = now
			s.place(j)
			a.add(j)
			res.Requeued = append(res.Requeued, j.export())
		}
	}
	s.settle(now, &a)
	s.mu.Unlock()
	s.publish(a.ns)
	return res, nil
}

// Promote makes up to limit due scheduled and retryable jobs available and announces their queues.
func (s *Store) Promote(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	now := time.Now()
	a := announcer{now: now}
	n := 0
	s.mu.Lock()
	for _, q := range s.queues {
		if n == limit {
			break
		}
		n += s.promoteQueue(q, now, limit-n, &a)
	}
	s.mu.Unlock()
	s.publish(a.ns)
	return n, nil
}

// DiscardExpired discards up to limit jobs not yet started (scheduled, available, pending or
// retryable) whose expiry has passed, each with an error entry of type "expired".
func (s *Store) DiscardExpired(ctx context.Context, limit int) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultLimit
	}
	var out []*store.Job
	s.mu.Lock()
	now := time.Now()
	a := announcer{now: now}
	for cut := nanos(now); len(out) < limit; {
		e := s.expiry.top()
		if e == nil || e.k1 > cut {
			break
		}
		j := e.j
		s.expiry.pop()
		j.inExpiry = false
		s.unplace(j)
		j.State = store.StateDiscarded
		j.CompletedAt = now
		j.Errors = append(j.Errors, store.AttemptError{
			Attempt: j.Attempt, At: now, Type: "expired", Message: "job expired before it started",
		})
		s.place(j)
		out = append(out, j.export())
	}
	s.settle(now, &a)
	s.mu.Unlock()
	s.publish(a.ns)
	return out, nil
}

// NextDue returns the earliest due time of queue's scheduled and retryable jobs, or, when sooner,
// the end of the rate window of an exhausted key with available jobs in queue.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queue]
	if q == nil {
		return time.Time{}, false, nil
	}
	next, ok := time.Time{}, false
	if e := q.waiting.top(); e != nil {
		next, ok = e.j.ScheduledAt, true
	}
	if len(q.limited) > 0 {
		if w, found := q.windowDue(time.Now()); found && (!ok || w.Before(next)) {
			next, ok = w, true
		}
	}
	if w, found := s.tenantWindowDue(q, time.Now()); found && (!ok || w.Before(next)) {
		next, ok = w, true
	}
	return next, ok, nil
}

// Cleanup deletes up to p.Limit terminal jobs that finished before their state's cut-off.
func (s *Store) Cleanup(ctx context.Context, p store.CleanupParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	cutoffs := [3]time.Time{p.CompletedBefore, p.CancelledBefore, p.DiscardedBefore}
	n := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.terminal {
		f := &s.terminal[i]
		if cutoffs[i].IsZero() {
			continue
		}
		var old []*job
		for k := f.head; k < len(f.items) && n+len(old) < limit; k++ {
			e := &f.items[k]
			if !e.live() {
				continue
			}
			if !e.j.CompletedAt.Before(cutoffs[i]) {
				break // finish order: the rest are newer
			}
			if p.Cleans(e.j.Queue) && !s.waited(e.j) {
				old = append(old, e.j)
			}
		}
		for _, j := range old {
			s.unplace(j)
			s.forget(j)
		}
		n += len(old)
	}
	return n, nil
}

// GetJob returns a copy of job id, or an error matching store.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.lockJob(ctx, id)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return j.export(), nil
}

// lockJob locks s.mu and returns job id with the lock held. When ctx is done or the job does not
// exist it returns an error with the lock released.
func (s *Store) lockJob(ctx context.Context, id string) (*job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	j := s.jobs[id]
	if j == nil {
		s.mu.Unlock()
		return nil, notFound(id)
	}
	return j, nil
}

func notFound(id string) error { return fmt.Errorf("memory: job %s: %w", id, store.ErrNotFound) }

// ListJobs returns one page of jobs in id order that match p's filters, and the cursor of the next
// page ("" when this page is the last). A non-positive p.Limit means 100.
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	match := func(j *job) bool {
		return (len(p.States) == 0 || slices.Contains(p.States, j.State)) &&
			(len(p.Queues) == 0 || slices.Contains(p.Queues, j.Queue)) &&
			(len(p.Kinds) == 0 || slices.Contains(p.Kinds, j.Kind)) &&
			hasAll(j.Tags, p.Tags) &&
			(p.WorkflowID == "" || j.WorkflowID == p.WorkflowID) &&
			(p.Tenant == "" || j.Tenant == p.Tenant) &&
			p.FinishedIn(j.CompletedAt)
	}
	lower, upper := p.IDWindow()
	var out []*store.Job
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.ids
	switch {
	case p.Tenant != "":
		// The tenant's own ids rather than every id (a workflow filter then applies per job).
		ids = nil
		if l := s.tenantIDs[p.Tenant]; l != nil {
			ids = l.ids
		}
	case p.WorkflowID != "":
		// A workflow's own ids, sorted, rather than every id.
		ids = s.workflowIDs(p.WorkflowID)
	}
	// visit offers the job of ids[i] and reports whether the page is complete with one more match
	// beyond it.
	visit := func(i int) (full bool) {
		j := s.jobs[ids[i]]
		if j == nil || !match(j) {
			return false
		}
		if len(out) == limit {
			return true
		}
		out = append(out, j.export())
		return false
	}
	more := false
	if p.Descending {
		start := len(ids)
		if upper != "" {
			start = sort.SearchStrings(ids, upper) // first id >= upper
		}
		for i := start - 1; i >= 0 && (lower == "" || ids[i] > lower) && !more; i-- {
			more = visit(i)
		}
	} else {
		start := 0
		if lower != "" {
			start = sort.Search(len(ids), func(i int) bool { return ids[i] > lower })
		}
		for i := start; i < len(ids) && (upper == "" || ids[i] < upper) && !more; i++ {
			more = visit(i)
		}
	}
	if !more {
		return out, "", nil
	}
	return out, out[len(out)-1].ID, nil
}

// transitionError reports a refused operation on j.
func transitionError(j *job, op string) error {
	return &store.TransitionError{JobID: j.ID, Operation: op, From: j.State}
}

// CancelJob cancels a job that is not terminal. When the job was active, a NotifyCancel tells its
// runner; its later completion is not applied and its heartbeats report it lost.
func (s *Store) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.lockJob(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if j.State.Terminal() {
		err := transitionError(j, "cancel")
		s.mu.Unlock()
		return nil, err
	}
	var cancels []store.Notification
	s.cancel(j, now, &cancels)
	a := announcer{now: now}
	s.settle(now, &a)
	out := j.export()
	s.mu.Unlock()
	s.publish(cancels)
	s.publish(a.ns)
	return out, nil
}

// cancel moves j, which is not terminal, to cancelled, appending a NotifyCancel to cancels when it
// was active, and then, when it had a rate key, an announcement of its queue (its key has room for
// one more job, as when a limited job finishes); s.mu must be held.
func (s *Store) cancel(j *job, now time.Time, cancels *[]store.Notification) {
	if j.State == store.StateActive {
		*cancels = append(*cancels, store.Notification{Kind: store.NotifyCancel, Queue: j.Queue, JobID: j.ID, ClaimToken: j.ClaimToken})
		if s.freesLimit(j) {
			*cancels = append(*cancels, store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
		}
		j.Errors = append(j.Errors, store.AttemptError{
			Attempt: j.Attempt, At: now, StartedAt: j.StartedAt, Type: store.ErrorTypeCancelled,
			Message: fmt.Sprintf("cancelled while running on worker %s", j.WorkerID),
		})
	}
	s.unplace(j)
	j.State = store.StateCancelled
	j.CompletedAt = now
	j.LeaseExpiresAt = time.Time{}
	j.WorkerID = ""
	s.place(j)
}

// RetryJob makes a discarded or cancelled job available again with its attempt count reset to zero
// and its error history kept.
func (s *Store) RetryJob(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, id, "retry", func(st store.State) bool {
		return st == store.StateDiscarded || st == store.StateCancelled
	})
}

// ActivateJob moves a pending job to available.
func (s *Store) ActivateJob(ctx context.Context, id string) (*store.Job, error) {
	return s.makeAvailable(ctx, id, "activate", func(st store.State) bool {
		return st == store.StatePending
	})
}

// makeAvailable moves job id to available now if its state is one from allows, and announces the
// job's queue. A job leaving a terminal state starts over: attempt zero, no completion time.
func (s *Store) makeAvailable(ctx context.Context, id, op string, from func(store.State) bool) (*store.Job, error) {
	now := time.Now()
	j, err := s.lockJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if !from(j.State) {
		err := transitionError(j, op)
		s.mu.Unlock()
		return nil, err
	}
	if err := s.retake(j, now); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.unplace(j)
	next := store.StateAvailable
	if j.State.Terminal() {
		j.Attempt = 0
		j.CompletedAt = time.Time{}
		if j.node != nil && len(j.node.parents) > 0 {
			// A workflow job retried waits again for its parents when their states would keep a
			// pending job waiting, as if it had never left pending; otherwise it runs now, with
			// their results, even after a failed parent (the operator's call).
			if decide(j) == outcomeWait {
				next = store.StatePending
			} else {
				j.ParentResults = parentResults(j.node.parents)
			}
		}
	}
	j.State = next
	j.ScheduledAt = now
	j.LeaseExpiresAt = time.Time{}
	j.WorkerID = ""
	s.place(j)
	out := j.export()
	s.mu.Unlock()
	if out.State == store.StateAvailable {
		s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: out.Queue})
	}
	return out, nil
}

// DeleteJob removes a job that is not active and returns it as it was.
func (s *Store) DeleteJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.lockJob(ctx, id)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if j.State == store.StateActive {
		return nil, transitionError(j, "delete")
	}
	if s.waited(j) {
		return nil, &store.TransitionError{JobID: j.ID, Operation: "delete", From: j.State, Reason: store.ReasonAwaitedParent}
	}
	s.unplace(j)
	s.forget(j)
	return j.export(), nil
}

// ListQueues returns every queue that has jobs or is paused, by name, with its counts per state.
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	out := make([]store.QueueInfo, 0, len(s.queues))
	for _, q := range s.queues {
		if !q.paused && q.total() == 0 {
			continue
		}
		counts := make(map[store.State]int64, len(store.AllStates))
		for i, st := range store.AllStates {
			counts[st] = q.counts[i]
		}
		out = append(out, store.QueueInfo{Name: q.name, Paused: q.paused, Counts: counts})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b store.QueueInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// PauseQueue stops claims from queue until ResumeQueue, and announces it.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	return s.setPaused(ctx, queue, true, store.NotifyPause)
}

// ResumeQueue lets claims from queue start again, and announces it.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	return s.setPaused(ctx, queue, false, store.NotifyResume)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool, kind store.NotificationKind) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.queue(queue).paused = paused
	s.mu.Unlock()
	s.hub.Publish(store.Notification{Kind: kind, Queue: queue})
	return nil
}

// Elect makes leaderID the leader of name for ttl if nobody else leads it now, and reports whether
// leaderID leads.
func (s *Store) Elect(ctx context.Context, name, leaderID string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.leaders[name]
	if ok && cur.id != leaderID && cur.until.After(now) {
		return false, nil
	}
	s.leaders[name] = leader{id: leaderID, until: now.Add(ttl)}
	return true, nil
}

// Resign ends leaderID's leadership of name, if it holds it.
func (s *Store) Resign(ctx context.Context, name, leaderID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.leaders[name]; ok && cur.id == leaderID {
		delete(s.leaders, name)
	}
	return nil
}

// exportInline is how many bytes of a handed-out job's raw JSON fields are allocated with it (see
// exportedJob).
const exportInline = 40

// exportedJob is a handed-out job whose raw JSON fields fit in buf, allocated as one object: a
// store.Job takes 656 bytes, and with the 8-byte header the runtime puts before an object this
// large that holds pointers, it lands in the 704-byte size class, so the 40 bytes of buf cost no
// memory and spare most jobs' second allocation (the claim's, on the hot path of every drain).
// TestExportedJobSizeClass says when store.Job grows out of that room.
type exportedJob struct {
	job store.Job
	buf [exportInline]byte
}

// export returns a deep copy of j that shares no memory with the store.
func (j *job) export() *store.Job {
	n := len(j.Args) + len(j.Meta) + len(j.Result) + len(j.RetryPolicy) + len(j.ParentResults)
	var out *store.Job
	var buf []byte
	if n <= exportInline {
		e := new(exportedJob)
		out, buf = &e.job, e.buf[:0]
	} else {
		out, buf = new(store.Job), make([]byte, 0, n)
	}
	*out = j.Job
	if j.State != store.StateActive {
		out.ClaimToken = ""
	}
	out.Args, buf = take(buf, j.Args)
	out.Meta, buf = take(buf, j.Meta)
	out.Result, buf = take(buf, j.Result)
	out.RetryPolicy, buf = take(buf, j.RetryPolicy)
	out.ParentResults, _ = take(buf, j.ParentResults)
	out.Tags = slices.Clone(j.Tags)
	out.ParentIDs = slices.Clone(j.ParentIDs)
	if j.UniqueStates != nil {
		out.UniqueStates = slices.Clone(j.UniqueStates)
	}
	if j.Errors != nil {
		out.Errors = make([]store.AttemptError, len(j.Errors))
		for i, e := range j.Errors {
			out.Errors[i] = cloneError(e)
		}
	}
	return out
}

// take appends b to buf, which has room for it, and returns the appended part with its capacity
// capped, so appending to it cannot reach the next field.
func take(buf []byte, b json.RawMessage) (json.RawMessage, []byte) {
	if b == nil {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, b...)
	return buf[start:len(buf):len(buf)], buf
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return slices.Clone(b)
}

func cloneError(e store.AttemptError) store.AttemptError {
	if e.Retryable != nil {
		r := *e.Retryable
		e.Retryable = &r
	}
	e.Details = cloneRaw(e.Details)
	return e
}

var _ store.DiscardedArchiver = (*Store)(nil)

// pruneSelect returns the discarded jobs of the queues p covers that its pass takes, oldest first,
// at most limit: those finished before p.Before, and those beyond the newest p.Keep.
func (s *Store) pruneSelect(p store.PruneParams, limit int) []*job {
	f := &s.terminal[terminalIndex(store.StateDiscarded)]
	covered := f.size()
	if len(p.Queues) > 0 || len(p.SkipQueues) > 0 {
		covered = 0
		for i := f.head; i < len(f.items); i++ {
			if e := &f.items[i]; e.live() && p.Prunes(e.j.Queue) {
				covered++
			}
		}
	}
	var taken []*job
	kept := 0
	for i := f.head; i < len(f.items) && len(taken) < limit; i++ {
		e := &f.items[i]
		if !e.live() || !p.Prunes(e.j.Queue) {
			continue
		}
		old := !p.Before.IsZero() && e.j.CompletedAt.Before(p.Before)
		if !old && (p.Keep <= 0 || covered-len(taken)-kept <= p.Keep) {
			break // the rest finished later: neither older nor beyond the newest Keep
		}
		if s.waited(e.j) {
			kept++ // beyond the bounds, but a pending child needs it
			continue
		}
		taken = append(taken, e.j)
	}
	return taken
}

// drop deletes j, a terminal job, and counts it under its queue in out.
func (s *Store) drop(j *job, out map[string]int) {
	s.unplace(j)
	s.forget(j)
	out[j.Queue]++
}

// hasAll reports whether tags has every one of want.
func hasAll(tags, want []string) bool {
	for _, w := range want {
		if !slices.Contains(tags, w) {
			return false
		}
	}
	return true
}

// PruneDiscarded deletes the oldest discarded jobs of the queues p covers: those finished before
// p.Before, and those beyond the newest p.Keep, at most p.Limit (see store.DiscardedPruner).
func (s *Store) PruneDiscarded(ctx context.Context, p store.PruneParams) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.pruneSelect(p, cmp.Or(max(p.Limit, 0), defaultLimit)) {
		s.drop(j, out)
	}
	return out, nil
}

// PruneCandidates returns copies of the discarded jobs PruneDiscarded(ctx, p) would delete now,
// oldest first (see store.DiscardedArchiver).
func (s *Store) PruneCandidates(ctx context.Context, p store.PruneParams) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := s.pruneSelect(p, cmp.Or(max(p.Limit, 0), defaultLimit))
	out := make([]*store.Job, len(taken))
	for i, j := range taken {
		out[i] = j.export()
	}
	return out, nil
}

// DeleteDiscarded deletes the jobs still discarded as read (see store.DiscardedArchiver).
func (s *Store) DeleteDiscarded(ctx context.Context, jobs []*store.Job) (map[string]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, read := range jobs {
		if j := s.jobs[read.ID]; j != nil && j.State == store.StateDiscarded && j.CompletedAt.Equal(read.CompletedAt) {
			s.drop(j, out)
		}
	}
	return out, nil
}
