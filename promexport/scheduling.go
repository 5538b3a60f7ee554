package promexport

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pronto-jobs/pronto"
)

// Scheduling series (ojs-fair-scheduling.md §11.2), fed by pronto serve's fetches
// (server.Server.SetSchedulingMetrics) and read at scrape time:
//
//	ojs_scheduling_dispatch_total{queue, pool}            jobs OJS fetches took (pool "": none named)
//	ojs_scheduling_dispatch_ratio{queue}                  each queue's share of those of the last minute
//	ojs_scheduling_queue_wait_duration_seconds{queue}     time from a job's due time to its dispatch
//	ojs_scheduling_pool_utilization{pool}                 active jobs in a pool's queues / its concurrency
//	ojs_scheduling_starvation_events_total{queue}         times a queue was found starved in a pool
//
// The counters, the histogram and the ratio count this process's fetches; the utilization is read
// from the store (the pools and the queue counts, cached Options.CacheTTL) for each pool with a
// concurrency bound. The application's own Go workers are not in them (see pronto_job_claimed_total).

// ratioWindow is the window of ojs_scheduling_dispatch_ratio, in one-second buckets (the scheduling
// statistics' PT1M).
const ratioWindow = 60

type schedMetrics struct {
	dispatched *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	starved    *prometheus.CounterVec
	ratio      *prometheus.Desc
	util       *prometheus.Desc

	mu      sync.Mutex
	buckets map[string]*[ratioWindow]struct{ sec, n int64 } // per queue
	// cached pools, for the utilization
	pools   []*pronto.WorkerPool
	poolsAt time.Time
}

func newSchedMetrics(latency []float64) *schedMetrics {
	return &schedMetrics{
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ojs_scheduling_dispatch_total",
			Help: "Jobs OJS workers' fetches took through this process, per queue and pool (pool empty: the fetch named none)."},
			[]string{"queue", "pool"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ojs_scheduling_queue_wait_duration_seconds",
			Help: "Time from when a job became available (its due time) to its dispatch to an OJS worker.", Buckets: latency},
			[]string{"queue"}),
		starved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ojs_scheduling_starvation_events_total",
			Help: "Times a queue with jobs available was found unreached by its pool's fetches for the pool's rotation interval."},
			[]string{"queue"}),
		ratio: prometheus.NewDesc("ojs_scheduling_dispatch_ratio",
			"Each queue's share of the jobs OJS fetches took through this process over the last minute.", []string{"queue"}, nil),
		util: prometheus.NewDesc("ojs_scheduling_pool_utilization",
			"Jobs active in a pool's queues over the pool's concurrency (pools with a bound only; cached for a few seconds).", []string{"pool"}, nil),
		buckets: map[string]*[ratioWindow]struct{ sec, n int64 }{},
	}
}

// ObserveDispatch counts a job an OJS fetch took from queue through pool ("" for none), due for
// wait. It implements server.SchedulingMetrics. The queue label is bounded as every queue label is
// (Options.MaxLabelValues), and so are the ratio's per-queue buckets.
func (m *Metrics) ObserveDispatch(queue, pool string, wait time.Duration) {
	sm := m.sched
	queue = m.queueLabels.value(queue)
	sm.dispatched.WithLabelValues(queue, pool).Inc()
	sm.wait.WithLabelValues(queue).Observe(nonNegative(wait))
	sec := time.Now().Unix()
	sm.mu.Lock()
	b := sm.buckets[queue]
	if b == nil {
		b = new([ratioWindow]struct{ sec, n int64 })
		sm.buckets[queue] = b
	}
	x := &b[sec%ratioWindow]
	if x.sec != sec {
		x.sec, x.n = sec, 0
	}
	x.n++
	sm.mu.Unlock()
}

// ObserveStarvation counts queue found starved in pool. It implements server.SchedulingMetrics.
func (m *Metrics) ObserveStarvation(queue, pool string) {
	m.sched.starved.WithLabelValues(m.queueLabels.value(queue)).Inc()
}

func (sm *schedMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{sm.dispatched, sm.wait, sm.starved}
}

// ratios returns each queue's share of the last minute's dispatches (every queue dispatched from
// since the start, 0 included).
func (sm *schedMetrics) ratios(now time.Time) map[string]float64 {
	sec := now.Unix()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	counts := make(map[string]int64, len(sm.buckets))
	var total int64
	for q, b := range sm.buckets {
		var n int64
		for _, x := range b {
			if x.sec > sec-ratioWindow && x.sec <= sec {
				n += x.n
			}
		}
		counts[q] = n
		total += n
	}
	out := make(map[string]float64, len(counts))
	for q, n := range counts {
		out[q] = 0
		if total > 0 {
			out[q] = float64(n) / float64(total)
		}
	}
	return out
}

// collectScheduling sends the dispatch ratios and the pools' utilization.
func (m *Metrics) collectScheduling(ch chan<- prometheus.Metric, c *pronto.Client) {
	sm := m.sched
	for q, r := range sm.ratios(time.Now()) {
		ch <- prometheus.MustNewConstMetric(sm.ratio, prometheus.GaugeValue, r, q)
	}
	if c == nil {
		return
	}
	pools := m.schedPools(c)
	if len(pools) == 0 {
		return
	}
	queues, ok := m.queues(c)
	if !ok {
		return
	}
	active := make(map[string]int64, len(queues))
	for _, q := range queues {
		active[q.Name] = q.Counts[pronto.StateActive]
	}
	for _, p := range pools {
		if p.Concurrency <= 0 {
			continue // no bound: no utilization
		}
		var n int64
		for _, q := range p.Queues {
			n += active[q]
		}
		ch <- prometheus.MustNewConstMetric(sm.util, prometheus.GaugeValue, float64(n)/float64(p.Concurrency), p.Name)
	}
}

// schedPools returns the pools, cached for CacheTTL (none from a store without settings; a failed
// read counts a scrape error and keeps the last known).
func (m *Metrics) schedPools(c *pronto.Client) []*pronto.WorkerPool {
	sm := m.sched
	sm.mu.Lock()
	if !sm.poolsAt.IsZero() && time.Since(sm.poolsAt) < m.opts.CacheTTL {
		pools := sm.pools
		sm.mu.Unlock()
		return pools
	}
	sm.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.QueryTimeout)
	defer cancel()
	pools, err := c.PoolList(ctx)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	switch {
	case errors.Is(err, pronto.ErrUnsupported):
		sm.pools = nil
	case err != nil:
		m.scrapeErrors.Inc()
	default:
		sm.pools = pools
	}
	sm.poolsAt = time.Now()
	return sm.pools
}
