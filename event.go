package pronto

import (
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what happened to a job.
type EventKind string

// Event kinds.
const (
	// EventCompleted: an attempt succeeded.
	EventCompleted EventKind = "job.completed"
	// EventFailed: an attempt failed and the job will be retried (it is retryable).
	EventFailed EventKind = "job.failed"
	// EventDiscarded: the job failed for good (attempts spent, Discard, non-retryable error, expired
	// lease with no attempts left: Err is then ErrJobLost, wrapped), or it expired (ExpiresAt) before
	// it started: Err is then ErrJobExpired and no attempt ran. The last two come from the leader's
	// maintenance, or from JobCatchUp on this client. A job whose rate limit had no room when a
	// claim of this client (its workers' or RemoteFetch) met it, and says LimitDrop, is discarded by
	// that claim: Err then matches ErrRateLimitDropped and no attempt ran.
	EventDiscarded EventKind = "job.discarded"
	// EventCancelled: the job was cancelled (by JobCancel or WorkflowCancel on this client, or by a
	// unique job inserted through this client that replaced it, or by its worker with Cancel, or
	// while running here, or after its worker here returned and before its outcome was written).
	EventCancelled EventKind = "job.cancelled"
	// EventSnoozed: the worker snoozed the job, or a claim of this client moved it to scheduled
	// because its rate limit had no room and says LimitReschedule (Err then matches
	// ErrRateLimitRescheduled, no attempt ran, and Job.ScheduledAt is when it is due again).
	EventSnoozed EventKind = "job.snoozed"
	// EventRetried: an operator retried a discarded or cancelled job with JobRetry (or JobRetryWith:
	// Job is then the new job) on this client.
	EventRetried EventKind = "job.retried"
	// EventPriorityChanged: an operator changed a waiting job's priority with JobSetPriority on this
	// client (OJS priority.changed): Job.Priority is the new one, PreviousPriority the one it had.
	EventPriorityChanged EventKind = "priority.changed"
	// EventRescued: this client, as leader, returned a job whose worker stopped heartbeating to available.
	EventRescued EventKind = "job.rescued"
	// EventDeadLetterPruned: this client, as leader, deleted Count discarded jobs of queue Job.Queue
	// that were past the dead letter retention (DiscardedRetention or DiscardedMaxCount). Job holds
	// the queue only.
	EventDeadLetterPruned EventKind = "dead_letter.pruned"
	// EventStarted: an attempt started, on this client's workers or fetched through RemoteFetch by an
	// OJS worker (Job.StartedAt is when). Only subscriptions that name it receive it.
	EventStarted EventKind = "job.started"
	// EventTenantThrottled: this client, as leader, throttled a noisy tenant (Config.NoisyNeighbors;
	// Tenant.Throttle says how). Only subscriptions that name it receive it, as for the other tenant
	// events, which carry no Job.
	EventTenantThrottled EventKind = "tenant.throttled"
	// EventTenantThrottleReleased: a tenant's throttle ended (Tenant.Release), at its Until by this
	// client as leader, or by TenantThrottleReset on this client.
	EventTenantThrottleReleased EventKind = "tenant.throttle_released"
	// EventTenantCreated: a tenant was configured for the first time (a weight, limit, enqueue limits
	// or priority boost where it had none) through this client.
	EventTenantCreated EventKind = "tenant.created"
	// EventWorkerStopped: this client's workers have stopped: Stop of a started client has let its
	// jobs finish (or cancelled them at its deadline), written their outcomes and ended its
	// maintenance. Worker says which; Job is nil. It is the client's last event. Only subscriptions
	// that name it receive it.
	EventWorkerStopped EventKind = "worker.stopped"
)

// WorkerStop is the payload of EventWorkerStopped (ojs-events.md 4.3 worker.stopped).
type WorkerStop struct {
	// ID is the client's id (Config.ID), the worker id its jobs were claimed under.
	ID string
	// Queues are the queues the client worked, sorted.
	Queues []string
	// Reason is why it stopped: "shutdown" (Stop).
	Reason string
	// JobsCompleted counts the attempts of the client's own workers that completed since Start.
	JobsCompleted int64
	// Uptime is how long the client worked, from Start to the end of Stop.
	Uptime time.Duration
}

// Event reports one thing that happened to a job on this client, or to a tenant (the tenant events,
// whose payload is Tenant).
type Event struct {
	Kind EventKind
	// Job is the job as this client last saw it (its State is the state it moved to).
	Job *JobRow
	// Err is the attempt's error, for failed, discarded, cancelled-by-worker events.
	Err error
	// Duration is how long the attempt ran, for events that end an attempt.
	Duration time.Duration
	At       time.Time
	// Count is the number of jobs, for EventDeadLetterPruned.
	Count int
	// Archived reports, for EventDeadLetterPruned, that the jobs went to Config.DeadLetterArchive
	// before they were deleted (the queue's pruning policy is PruneArchive).
	Archived bool
	// From is the state the job left, for EventRetried (discarded: a retry from the dead letter
	// queue; cancelled), when the client read it; else empty.
	From State
	// PreviousPriority is the priority the job had, for EventPriorityChanged.
	PreviousPriority int
	// Tenant is the payload of the tenant events (Job is nil for them).
	Tenant *TenantEvent
	// Limit is the payload of EventRateLimitExceeded and EventRateLimitReleased: the key and the
	// bound found without room.
	Limit *LimitHit
	// Worker is the payload of EventWorkerStopped.
	Worker *WorkerStop
}

// eventBus fans events out to subscribers without ever blocking a worker: a subscriber whose buffer is
// full misses the event (counted in Dropped).
type eventBus struct {
	mu      sync.RWMutex
	subs    map[int]*subscription
	next    int
	dropped atomic.Int64
}

type subscription struct {
	ch    chan *Event
	kinds map[EventKind]bool // nil: all but the opt-in kinds
}

// takes reports whether the subscription receives events of kind k. EventStarted, as frequent as
// claims, EventCheckpointSaved, as frequent as checkpoints, EventDeadLetterPruned, which is about
// a queue rather than a job, and the tenant, rate-limit and worker events, which carry no job or not
// only a job, go only to subscriptions that name them.
func (s *subscription) takes(k EventKind) bool {
	if s.kinds == nil {
		return k != EventStarted && k != EventCheckpointSaved && k != EventDeadLetterPruned &&
			k != EventTenantThrottled && k != EventTenantThrottleReleased && k != EventTenantCreated &&
			k != EventRateLimitExceeded && k != EventRateLimitReleased && k != EventWorkerStopped &&
			k != EventSchemaIncompatible
	}
	return s.kinds[k]
}

func (b *eventBus) subscribe(buffer int, kinds []EventKind) (<-chan *Event, func()) {
	s := &subscription{ch: make(chan *Event, buffer)}
	if len(kinds) > 0 {
		s.kinds = make(map[EventKind]bool, len(kinds))
		for _, k := range kinds {
			s.kinds[k] = true
		}
	}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = make(map[int]*subscription)
	}
	id := b.next
	b.next++
	b.subs[id] = s
	b.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, id)
			b.mu.Unlock()
			close(s.ch)
		})
	}
}

func (b *eventBus) active() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs) > 0
}

// wants reports whether any subscriber takes events of kind k.
func (b *eventBus) wants(k EventKind) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, s := range b.subs {
		if s.takes(k) {
			return true
		}
	}
	return false
}

func (b *eventBus) emit(e *Event) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, s := range b.subs {
		if !s.takes(e.Kind) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			b.dropped.Add(1)
		}
	}
}
