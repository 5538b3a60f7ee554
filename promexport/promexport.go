// Package promexport exports a pronto client's metrics to Prometheus.
//
// An application builds one Metrics, installs its middleware in the client's Config (Instrument),
// attaches it to the client once built (Attach), and registers it on its own registry:
//
//	m := promexport.New(nil)
//	cfg := &pronto.Config{Queues: ..., Workers: ...}
//	m.Instrument(cfg)
//	client, err := pronto.NewClient(st, cfg)
//	...
//	detach := m.Attach(client)
//	defer detach()
//	registry.MustRegister(m)
//
// Counters and histograms are counted by this process (inserts through the insert middleware,
// attempt starts and outcomes from the client's events, OJS workers' fetches and acks included; the
// scheduling series from pronto serve's fetches, see scheduling.go); gauges are read at
// scrape time: job counts per queue and state from one store query (QueueList), cached for
// Options.CacheTTL, and worker slots, leadership and the outcome backlog from Client.Stats.
//
// Labels are bounded: queue, type (the job's kind), state, outcome and pool; tenant_id only on the
// per-tenant series of Options.TenantLabels. Nothing is labelled with a job id or an error message.
// docs/observability.md lists every series.
//
// A scrape never holds up the counting of events: the store queries of a scrape run under locks of
// their own, which the event loop never takes, so a slow store delays the scrape, not the counters.
package promexport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Options tunes a Metrics. The zero value (or nil) takes every default.
type Options struct {
	// CacheTTL is how long job counts read from the store are reused by later scrapes (default 5 s).
	// Several Prometheus servers scraping one process then cost one query per TTL.
	CacheTTL time.Duration
	// QueryTimeout bounds the store query of one scrape (default 5 s). A failed or timed-out query
	// leaves the job-count gauges out of that scrape and counts a scrape error.
	QueryTimeout time.Duration
	// DurationBuckets are the buckets of run durations (default: the OJS recommendation, 5 ms to 300 s).
	DurationBuckets []float64
	// LatencyBuckets are the buckets of pickup latency, queue time and turnaround (default: the OJS
	// queue-time recommendation, 10 ms to 1 h).
	LatencyBuckets []float64
	// TenantLabels adds the per-tenant series (labelled tenant_id, see tenants.go and
	// docs/observability.md): off by default, since each tenant adds series (cardinality).
	TenantLabels bool
	// PriorityLabels adds ojs_queue_available_by_priority{queue, priority} (see priority.go and
	// docs/observability.md): off by default, since a scrape then queries the store once per queue
	// with available jobs and each priority in use adds a series.
	PriorityLabels bool
	// MaxLabelValues bounds the distinct values of the queue, type and tenant_id labels each
	// (default DefaultMaxLabelValues): values first seen after that many are exported as OtherLabel,
	// and the queues and tenants past it are summed under it in the gauges.
	MaxLabelValues int
}

// Bucket boundaries recommended by ojs-observability.md, section 8.2.
var (
	defaultDurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	defaultLatencyBuckets  = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
	// Checkpoint sizes in bytes: 64 B to the 64 KiB limit (pronto.MaxProgressDataBytes).
	defaultCheckpointBuckets = []float64{64, 256, 1024, 4096, 16384, 65536}
)

// Metrics is a prometheus.Collector of one client's job metrics. It is safe for concurrent use.
type Metrics struct {
	opts Options
	// queueLabels, typeLabels and tenantLabels bound the values of the queue, type and tenant_id
	// labels.
	queueLabels, typeLabels, tenantLabels *labelCap

	enqueued, claimed, completed, failed, attemptsFailed *prometheus.CounterVec
	retried, cancelled, snoozed, rescued, expired        *prometheus.CounterVec
	duration                                             *prometheus.HistogramVec
	pickup, queueTime, turnaround                        *prometheus.HistogramVec

	progressUpdates, progressStalls *prometheus.CounterVec
	progressCompleted               *prometheus.CounterVec
	checkpointSize                  *prometheus.HistogramVec
	deadAdded                       *prometheus.CounterVec
	deadRetried, deadPruned         *prometheus.CounterVec
	deadArchived                    *prometheus.CounterVec
	priorityChanges                 *prometheus.CounterVec
	deadTotal                       *prometheus.Desc
	stalledJobs                     *prometheus.Desc

	// stalledMu guards stalled and stalledQueues; the event loop takes it, so nothing holds it
	// across a store call.
	stalledMu     sync.Mutex
	stalled       map[string]string // job id → queue, of the jobs stalled now
	stalledQueues map[string]bool   // queues that had a stall: reported from then on, zeros included

	depth, busy, free, prefetched    *prometheus.Desc
	active, leader, backlog, dropped *prometheus.Desc
	scrapeErrors                     prometheus.Counter
	started, listener                *prometheus.Desc

	tenant *tenantMetrics   // nil unless Options.TenantLabels
	prio   *priorityMetrics // nil unless Options.PriorityLabels
	sched  *schedMetrics    // the scheduling series (scheduling.go)

	client atomic.Pointer[pronto.Client]
	queued storeCache[pronto.QueueInfo] // job counts per queue (QueueList)
}

// New returns a Metrics with opts (nil: defaults). Register it once, on one registry.
func New(opts *Options) *Metrics {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 5 * time.Second
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	if len(o.DurationBuckets) == 0 {
		o.DurationBuckets = defaultDurationBuckets
	}
	if len(o.LatencyBuckets) == 0 {
		o.LatencyBuckets = defaultLatencyBuckets
	}
	if o.MaxLabelValues <= 0 {
		o.MaxLabelValues = DefaultMaxLabelValues
	}
	qt := []string{"queue", "type"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, qt)
	}
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		opts:           o,
		queueLabels:    newLabelCap(o.MaxLabelValues),
		typeLabels:     newLabelCap(o.MaxLabelValues),
		tenantLabels:   newLabelCap(o.MaxLabelValues),
		enqueued:       counter("ojs_job_enqueued_total", "Jobs inserted by this process (duplicates a unique key turned away are not counted)."),
		claimed:        counter("pronto_job_claimed_total", "Attempts started: by this client's workers, or fetched through it by OJS workers."),
		completed:      counter("ojs_job_completed_total", "Jobs that reached the completed state on this process."),
		failed:         counter("ojs_job_failed_total", "Jobs that reached the discarded state on this process (failed for good)."),
		attemptsFailed: counter("pronto_job_attempts_failed_total", "Attempts that ended in an error, whether the job will be retried or was discarded."),
		retried:        counter("ojs_job_retried_total", "Jobs put back for another attempt: failed attempts with a retry scheduled, and manual retries."),
		cancelled:      counter("ojs_job_cancelled_total", "Jobs cancelled, by an operator or by their worker."),
		snoozed:        counter("pronto_job_snoozed_total", "Attempts that snoozed their job."),
		rescued:        counter("pronto_job_rescued_total", "Jobs whose lease expired (their worker stopped heartbeating) and were returned to available by this process as leader."),
		expired:        counter("pronto_job_lease_expired_discarded_total", "Jobs whose lease expired with no attempts left and were discarded by this process as leader."),
		duration: hist("ojs_job_duration_seconds", "How long attempts ran, by the state the attempt left the job in.",
			o.DurationBuckets, "queue", "type", "state"),
		pickup: hist("pronto_job_pickup_latency_seconds", "Time from when an attempt was due to when it started.",
			o.LatencyBuckets, "queue", "type"),
		queueTime: hist("ojs_job_queue_time_seconds", "Time from a job's insert to the start of its first attempt.",
			o.LatencyBuckets, "queue", "type"),
		turnaround: hist("pronto_job_turnaround_seconds", "Time from a job's insert to its completion (completed jobs only).",
			o.LatencyBuckets, "queue", "type"),
		depth:           prometheus.NewDesc("ojs_queue_depth", "Jobs per queue per state, as the store holds them (cached for a few seconds).", []string{"queue", "state"}, nil),
		busy:            prometheus.NewDesc("ojs_workers_busy", "Jobs this client is running now, per queue.", []string{"queue"}, nil),
		free:            prometheus.NewDesc("pronto_workers_free", "Worker slots free on this client, per queue (prefetch slots included).", []string{"queue"}, nil),
		prefetched:      prometheus.NewDesc("pronto_jobs_prefetched", "Jobs this client has claimed ahead of a free worker, per queue (QueueConfig.Prefetch).", []string{"queue"}, nil),
		active:          prometheus.NewDesc("ojs_workers_active", "Jobs this client is running now, over all queues.", nil, nil),
		leader:          prometheus.NewDesc("pronto_leader", "1 when this client runs the cluster's maintenance (rescue, promotion, cleanup, cron), else 0.", nil, nil),
		backlog:         prometheus.NewDesc("pronto_completer_backlog", "Attempt outcomes waiting to be written to the store.", nil, nil),
		dropped:         prometheus.NewDesc("pronto_events_dropped_total", "Client events a subscriber missed because its buffer was full (metrics counted from events undercount by up to this).", nil, nil),
		listener:        prometheus.NewDesc("pronto_notifier_connected", "1 while the store's notification listener is connected (PostgreSQL only; absent for stores that notify in process).", nil, nil),
		started:         prometheus.NewDesc("pronto_client_started", "1 while the client is working jobs (started and not stopped), else 0.", nil, nil),
		progressUpdates: counter("ojs_progress_updates_total", "Progress reports written (at most one a second per job) for jobs run by or reported through this process."),
		progressStalls:  counter("pronto_progress_stalled_total", "Times an active job that reported progress went silent for Config.ProgressStallTimeout."),
		stalledJobs:     prometheus.NewDesc("ojs_progress_stalled_jobs", "Active jobs whose progress has stalled now (since the stall, no report and no outcome), as this process saw them.", []string{"queue"}, nil),
		progressCompleted: counter("pronto_progress_completed_total",
			"Jobs that completed after their completing attempt reported progress (progress.completed events)."),
		checkpointSize: hist("ojs_progress_checkpoint_size_bytes", "Size of the checkpoints written (encoded JSON).",
			defaultCheckpointBuckets, "type"),
		deadAdded: counter("ojs_dead_letter_added_total", "Jobs that entered the dead letter queue (the discarded state) on this process."),
		deadRetried: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ojs_dead_letter_retried_total",
			Help: "Discarded jobs an operator retried through this process."}, []string{"queue"}),
		deadPruned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ojs_dead_letter_pruned_total",
			Help: "Discarded jobs the dead letter retention deleted (by age or count) while this process led."}, []string{"queue"}),
		deadArchived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pronto_dead_letter_archived_total",
			Help: "Pruned discarded jobs the dead letter archive kept before they were deleted (pruning_policy archive) while this process led; included in ojs_dead_letter_pruned_total."}, []string{"queue"}),
		priorityChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pronto_priority_changes_total",
			Help: "Waiting jobs whose priority was changed through this client (JobSetPriority: from Go, PATCH /ojs/v1/jobs/{id}, the dashboard)."}, []string{"queue"}),
		deadTotal:     prometheus.NewDesc("ojs_dead_letter_total", "Jobs in the dead letter queue (discarded) per queue, as the store holds them (cached for a few seconds).", []string{"queue"}, nil),
		stalled:       map[string]string{},
		stalledQueues: map[string]bool{},
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pronto_metrics_store_errors_total",
			Help: "Scrapes whose store query for job counts failed (ojs_queue_depth was left out of them)."}),
	}
	if o.TenantLabels {
		m.tenant = newTenantMetrics()
	}
	if o.PriorityLabels {
		m.prio = newPriorityMetrics()
	}
	m.sched = newSchedMetrics(o.LatencyBuckets)
	return m
}

func (m *Metrics) vectors() []prometheus.Collector {
	return []prometheus.Collector{m.enqueued, m.claimed, m.completed, m.failed, m.attemptsFailed, m.retried,
		m.cancelled, m.snoozed, m.rescued, m.expired, m.duration, m.pickup, m.queueTime, m.turnaround, m.scrapeErrors,
		m.progressUpdates, m.progressStalls, m.progressCompleted, m.checkpointSize, m.deadAdded, m.deadRetried, m.deadPruned, m.deadArchived,
		m.priorityChanges}
}

// allCollectors is vectors plus the per-tenant and the scheduling vectors.
func (m *Metrics) allCollectors() []prometheus.Collector {
	return append(append(m.vectors(), m.tenantCollectors()...), m.sched.collectors()...)
}

// Instrument appends the metrics' insert middleware to cfg. Call it before NewClient.
func (m *Metrics) Instrument(cfg *pronto.Config) {
	cfg.InsertMiddleware = append(cfg.InsertMiddleware, m.InsertMiddleware())
}

// InsertMiddleware counts inserted jobs (ojs_job_enqueued_total, and the tenant's with
// Options.TenantLabels). A job inserted in the application's transaction (InsertTx, InsertSQLTx) is
// counted once the client sees the transaction committed, never when it rolls back (see
// pronto.AfterInsertCommit).
func (m *Metrics) InsertMiddleware() pronto.InsertMiddleware {
	return func(ctx context.Context, params []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
		rows, err := next(ctx, params)
		// Counted once the jobs are committed: an insert in the application's transaction
		// (InsertTx, InsertSQLTx) that rolls back inserted nothing.
		pronto.AfterInsertCommit(ctx, func() {
			for _, r := range rows {
				if r != nil && !r.Duplicate {
					m.enqueued.WithLabelValues(m.queueLabels.value(r.Queue), m.typeLabels.value(r.Kind)).Inc()
					m.tenantInserted(r)
				}
			}
		})
		return rows, err
	}
}

// attemptStarted counts an attempt start (on the client's workers or fetched by an OJS worker) and
// observes its pickup latency and, for a first attempt, its queue time.
func (m *Metrics) attemptStarted(job *pronto.JobRow, at time.Time) {
	q, t := m.queueLabels.value(job.Queue), m.typeLabels.value(job.Kind)
	m.claimed.WithLabelValues(q, t).Inc()
	start := job.StartedAt
	if start.IsZero() {
		start = at
	}
	if !job.ScheduledAt.IsZero() {
		m.pickup.WithLabelValues(q, t).Observe(nonNegative(start.Sub(job.ScheduledAt)))
	}
	if job.Attempt == 1 && !job.CreatedAt.IsZero() {
		m.queueTime.WithLabelValues(q, t).Observe(nonNegative(start.Sub(job.CreatedAt)))
	}
}

func nonNegative(d time.Duration) float64 { return max(d, 0).Seconds() }

// Attach follows c's events (outcome counters and histograms) and reads c's stats and queue counts at
// scrape time. It returns a function that stops following the events. Attach one client per Metrics;
// attaching another replaces the first for the gauges.
func (m *Metrics) Attach(c *pronto.Client) (detach func()) {
	m.client.Store(c) // the cached counts are of the client they were read through: none of c's yet
	m.sched.mu.Lock()
	m.sched.pools, m.sched.poolsAt = nil, time.Time{}
	m.sched.mu.Unlock()
	events, unsubscribe := c.Subscribe(pronto.EventStarted, pronto.EventCompleted, pronto.EventFailed,
		pronto.EventDiscarded, pronto.EventCancelled, pronto.EventSnoozed, pronto.EventRetried, pronto.EventRescued,
		pronto.EventProgress, pronto.EventProgressStalled, pronto.EventProgressCompleted, pronto.EventCheckpointSaved,
		pronto.EventDeadLetterPruned, pronto.EventPriorityChanged)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range events {
			m.observe(e)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			unsubscribe()
			<-done
		})
	}
}

// observe counts one client event.
func (m *Metrics) observe(e *pronto.Event) {
	j := e.Job
	if j == nil {
		return
	}
	q, t := m.queueLabels.value(j.Queue), m.typeLabels.value(j.Kind)
	m.tenantObserve(e)
	// An attempt ended here unless the rescuer discarded a job whose lease expired (Err is
	// ErrJobLost), a job expired before it started (ErrJobExpired) or a claim dropped a job for its
	// rate limit (ErrRateLimitDropped): each counts as discarded. Duration alone cannot tell: an
	// OJS worker's attempt is timed from started_at, which the database's clock set, and a database
	// clock ahead of this host's makes it 0.
	lost := errors.Is(e.Err, pronto.ErrJobLost)
	noAttempt := lost || errors.Is(e.Err, pronto.ErrJobExpired) || errors.Is(e.Err, pronto.ErrRateLimitDropped)
	attemptEnded := e.Duration > 0 ||
		(!noAttempt && (e.Kind == pronto.EventCompleted || e.Kind == pronto.EventFailed || e.Kind == pronto.EventDiscarded))
	switch e.Kind {
	case pronto.EventCheckpointSaved:
		m.checkpointSize.WithLabelValues(t).Observe(float64(len(j.LastCheckpoint)))
		return
	case pronto.EventProgressCompleted:
		m.progressCompleted.WithLabelValues(q, t).Inc()
		return
	case pronto.EventDeadLetterPruned:
		m.deadPruned.WithLabelValues(q).Add(float64(e.Count))
		if e.Archived {
			m.deadArchived.WithLabelValues(q).Add(float64(e.Count))
		}
		return
	case pronto.EventPriorityChanged:
		m.priorityChanges.WithLabelValues(q).Inc()
		return
	}
	if e.Kind == pronto.EventProgressStalled {
		m.progressStalls.WithLabelValues(q, t).Inc()
		m.stalledMu.Lock()
		m.stalled[j.ID] = q
		m.stalledQueues[q] = true
		m.stalledMu.Unlock()
		return
	}
	m.stalledMu.Lock()
	delete(m.stalled, j.ID) // a report or an outcome ends a stall
	m.stalledMu.Unlock()
	switch e.Kind {
	case pronto.EventStarted:
		m.attemptStarted(j, e.At)
		return
	case pronto.EventProgress:
		m.progressUpdates.WithLabelValues(q, t).Inc()
		return
	case pronto.EventCompleted:
		m.completed.WithLabelValues(q, t).Inc()
		if !j.CreatedAt.IsZero() && !j.CompletedAt.IsZero() {
			m.turnaround.WithLabelValues(q, t).Observe(nonNegative(j.CompletedAt.Sub(j.CreatedAt)))
		}
	case pronto.EventFailed:
		m.attemptsFailed.WithLabelValues(q, t).Inc()
		m.retried.WithLabelValues(q, t).Inc()
	case pronto.EventDiscarded:
		m.failed.WithLabelValues(q, t).Inc()
		m.deadAdded.WithLabelValues(q, t).Inc()
		if lost {
			m.expired.WithLabelValues(q, t).Inc() // from the rescuer: no attempt ended here
		} else if !noAttempt {
			m.attemptsFailed.WithLabelValues(q, t).Inc()
		}
	case pronto.EventCancelled:
		m.cancelled.WithLabelValues(q, t).Inc()
	case pronto.EventSnoozed:
		m.snoozed.WithLabelValues(q, t).Inc()
	case pronto.EventRetried:
		m.retried.WithLabelValues(q, t).Inc()
		if e.From == pronto.StateDiscarded {
			m.deadRetried.WithLabelValues(q).Inc()
		}
	case pronto.EventRescued:
		m.rescued.WithLabelValues(q, t).Inc()
	}
	if attemptEnded {
		m.duration.WithLabelValues(q, t, string(j.State)).Observe(e.Duration.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.allCollectors() {
		c.Describe(ch)
	}
	for _, d := range append([]*prometheus.Desc{m.depth, m.busy, m.free, m.prefetched, m.active, m.leader, m.backlog, m.dropped, m.started, m.listener,
		m.stalledJobs, m.deadTotal, m.sched.ratio, m.sched.util}, append(m.tenantDescs(), m.priorityDescs()...)...) {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Gauges need an attached client; before Attach only the
// counters and histograms are collected.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if c := m.client.Load(); c != nil {
		m.collectGauges(ch, c)
		m.collectTenants(ch, c)
		m.collectPriorities(ch, c)
	}
	m.collectScheduling(ch, m.client.Load())
	for _, v := range m.allCollectors() {
		v.Collect(ch)
	}
}

// addStateCounts adds counts to the per-state sums of the series labelled name: names past the
// label bound share OtherLabel's series, which so sums them.
func addStateCounts(byLabel map[string]map[pronto.State]int64, name string, counts map[pronto.State]int64) {
	sum := byLabel[name]
	if sum == nil {
		sum = make(map[pronto.State]int64, len(allStates))
		byLabel[name] = sum
	}
	for _, s := range allStates {
		sum[s] += counts[s]
	}
}

func (m *Metrics) collectGauges(ch chan<- prometheus.Metric, c *pronto.Client) {
	if queues, ok := m.queues(c); ok {
		// Queues past the label bound are summed under OtherLabel.
		byLabel := make(map[string]map[pronto.State]int64, len(queues))
		for _, q := range queues {
			addStateCounts(byLabel, m.queueLabels.value(q.Name), q.Counts)
		}
		// A queue this client works reports zeros when the store lists it no more (its last job
		// deleted), so its series never vanish.
		for name := range c.Stats().Queues {
			if name = m.queueLabels.value(name); byLabel[name] == nil {
				byLabel[name] = map[pronto.State]int64{}
			}
		}
		for name, counts := range byLabel {
			for _, s := range allStates {
				ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(counts[s]), name, string(s))
			}
			ch <- prometheus.MustNewConstMetric(m.deadTotal, prometheus.GaugeValue, float64(counts[pronto.StateDiscarded]), name)
		}
	}
	m.pruneStalled(c)
	m.stalledMu.Lock()
	stalled := map[string]int{}
	for q := range m.stalledQueues {
		stalled[q] = 0
	}
	for _, q := range m.stalled {
		stalled[q]++
	}
	m.stalledMu.Unlock()
	st := c.Stats()
	for name := range st.Queues {
		if _, ok := stalled[name]; !ok {
			stalled[name] = 0 // every queue this client works reports, zero included
		}
	}
	for q, n := range stalled {
		ch <- prometheus.MustNewConstMetric(m.stalledJobs, prometheus.GaugeValue, float64(n), q)
	}
	running := 0
	for name, qs := range st.Queues {
		running += qs.Running
		ch <- prometheus.MustNewConstMetric(m.busy, prometheus.GaugeValue, float64(qs.Running), name)
		ch <- prometheus.MustNewConstMetric(m.free, prometheus.GaugeValue, float64(qs.Free), name)
		ch <- prometheus.MustNewConstMetric(m.prefetched, prometheus.GaugeValue, float64(qs.Prefetched), name)
	}
	ch <- prometheus.MustNewConstMetric(m.active, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(m.leader, prometheus.GaugeValue, boolValue(st.Leader))
	ch <- prometheus.MustNewConstMetric(m.started, prometheus.GaugeValue, boolValue(st.Started))
	if ls, ok := c.Store().(store.ListenerStatus); ok {
		ch <- prometheus.MustNewConstMetric(m.listener, prometheus.GaugeValue, boolValue(ls.ListenerConnected()))
	}
	ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(st.CompleterBacklog))
	ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(st.DroppedEvents))
}

// maxStalledChecks bounds the stalled jobs one scrape rereads.
const maxStalledChecks = 100

// pruneStalled forgets the stalled jobs that no longer run: a job whose outcome another process
// recorded (an OJS worker acking through another server) sends this one no event. It rereads at
// most maxStalledChecks jobs per scrape, one query each; stalls are few.
func (m *Metrics) pruneStalled(c *pronto.Client) {
	m.stalledMu.Lock()
	ids := make([]string, 0, min(len(m.stalled), maxStalledChecks))
	for id := range m.stalled {
		if len(ids) == maxStalledChecks {
			break
		}
		ids = append(ids, id)
	}
	m.stalledMu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.QueryTimeout)
	defer cancel()
	for _, id := range ids {
		j, err := c.JobGet(ctx, id)
		if err != nil && !errors.Is(err, pronto.ErrNotFound) {
			return // the store does not answer: keep what is known
		}
		if err == nil && j.State == pronto.StateActive {
			continue
		}
		m.stalledMu.Lock()
		delete(m.stalled, id)
		m.stalledMu.Unlock()
	}
}

// allStates lists the eight OJS states, so every queue reports every state (zero included) and a
// PromQL query never meets a series that vanishes when its count drops to zero.
var allStates = []pronto.State{pronto.StateScheduled, pronto.StateAvailable, pronto.StatePending, pronto.StateActive,
	pronto.StateCompleted, pronto.StateRetryable, pronto.StateCancelled, pronto.StateDiscarded}

// queues returns the job counts per queue, from the cache while it is fresh: one ListQueues query per
// CacheTTL however many series and scrapers there are.
func (m *Metrics) queues(c *pronto.Client) ([]pronto.QueueInfo, bool) {
	qs, err := m.queued.get(c, m.opts, c.QueueList)
	if err != nil {
		m.scrapeErrors.Inc()
		return nil, false
	}
	return qs, true
}

// storeCache holds counts a scrape read from the store, for Options.CacheTTL. Its lock is held
// across the query, so concurrent scrapes of a stale cache wait for one query; it is a lock of its
// own, which the event loop never takes, so a slow query holds up scrapes only.
type storeCache[T any] struct {
	mu     sync.Mutex
	client *pronto.Client // the client val was read through
	val    []T
	at     time.Time
}

// get returns the counts read through c, from the cache while they are fresh, else from read
// (bounded by Options.QueryTimeout). A failed read keeps the cache as it was.
func (sc *storeCache[T]) get(c *pronto.Client, o Options, read func(context.Context) ([]T, error)) ([]T, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.client == c && sc.val != nil && time.Since(sc.at) < o.CacheTTL {
		return sc.val, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.QueryTimeout)
	defer cancel()
	v, err := read(ctx)
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = []T{} // cached: an empty store is not queried again within the TTL
	}
	sc.client, sc.val, sc.at = c, v, time.Now()
	return v, nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
