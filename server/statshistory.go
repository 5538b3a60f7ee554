package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Historical statistics (ojs-admin-api.md 10.2): per-queue counters this server keeps in memory, one
// bucket per minute for StatsMinuteRetention and one per hour for StatsHourRetention, fed by the
// events the server sees (its client's attempt outcomes, which include those of OJS workers acking
// through it, and the jobs enqueued through it). Recording costs a map update per event; a query
// reads at most 1440 buckets per queue, never the jobs. The figures are this process's: behind
// several servers, sum them (or use the Prometheus metrics, which the same caveat applies to).
const (
	StatsMinuteRetention = 24 * time.Hour
	StatsHourRetention   = 30 * 24 * time.Hour
)

// statLatencyBoundsMS are the upper bounds of the run-time buckets percentiles are read from (the
// last bucket is unbounded).
var statLatencyBoundsMS = [...]int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
	30000, 60000, 120000, 300000, 600000, 1800000, 3600000}

// statBucket is one queue's counts over one minute or hour.
type statBucket struct {
	processed, failed, enqueued int64
	lat                         [len(statLatencyBoundsMS) + 1]int64
}

func (b *statBucket) add(o *statBucket) {
	b.processed += o.processed
	b.failed += o.failed
	b.enqueued += o.enqueued
	for i := range b.lat {
		b.lat[i] += o.lat[i]
	}
}

// percentileMS is the upper bound of the bucket holding the q-quantile of the run times, or -1
// without any.
func (b *statBucket) percentileMS(q float64) int64 {
	var n int64
	for _, c := range b.lat {
		n += c
	}
	if n == 0 {
		return -1
	}
	rank := int64(q*float64(n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, c := range b.lat {
		seen += c
		if seen >= rank {
			if i < len(statLatencyBoundsMS) {
				return statLatencyBoundsMS[i]
			}
			return statLatencyBoundsMS[len(statLatencyBoundsMS)-1]
		}
	}
	return statLatencyBoundsMS[len(statLatencyBoundsMS)-1]
}

// statsHistory holds the buckets: unix minute (or hour) → queue → counts. The zero value is ready.
type statsHistory struct {
	mu         sync.Mutex
	minutes    map[int64]map[string]*statBucket
	hours      map[int64]map[string]*statBucket
	lastPruned int64 // the minute of the last prune
}

// statKind says what one event counts as.
type statKind int

const (
	statProcessed statKind = iota // a completed attempt (with its run time)
	statFailed                    // a failed attempt (with its run time)
	statEnqueued                  // a job enqueued
)

func bucketIn(m map[int64]map[string]*statBucket, slot int64, queue string) *statBucket {
	qs := m[slot]
	if qs == nil {
		qs = map[string]*statBucket{}
		m[slot] = qs
	}
	b := qs[queue]
	if b == nil {
		b = &statBucket{}
		qs[queue] = b
	}
	return b
}

// record counts one event of queue at time at; d is the attempt's run time.
func (h *statsHistory) record(kind statKind, queue string, at time.Time, d time.Duration) {
	if at.IsZero() {
		at = time.Now()
	}
	minute := at.Unix() / 60
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.minutes == nil {
		h.minutes = map[int64]map[string]*statBucket{}
		h.hours = map[int64]map[string]*statBucket{}
	}
	if minute > h.lastPruned {
		h.lastPruned = minute
		for m := range h.minutes {
			if m < minute-int64(StatsMinuteRetention/time.Minute) {
				delete(h.minutes, m)
			}
		}
		hour := minute / 60
		for hr := range h.hours {
			if hr < hour-int64(StatsHourRetention/time.Hour) {
				delete(h.hours, hr)
			}
		}
	}
	for _, b := range []*statBucket{bucketIn(h.minutes, minute, queue), bucketIn(h.hours, minute/60, queue)} {
		switch kind {
		case statEnqueued:
			b.enqueued++
			continue
		case statProcessed:
			b.processed++
		case statFailed:
			b.failed++
		}
		ms := d.Milliseconds()
		i := 0
		for i < len(statLatencyBoundsMS) && ms > statLatencyBoundsMS[i] {
			i++
		}
		b.lat[i]++
	}
}

// sum adds up the buckets of [from, to) (unix minutes, or hours when hourly), for queue ("" for
// all) into out.
func (h *statsHistory) sum(hourly bool, from, to int64, queue string, out *statBucket) {
	src := h.minutes
	if hourly {
		src = h.hours
	}
	for slot := from; slot < to; slot++ {
		for q, b := range src[slot] {
			if queue == "" || q == queue {
				out.add(b)
			}
		}
	}
}

// throughput returns the jobs processed and attempts failed per minute over the last five minutes
// (the current one included), for queue ("" for all).
func (h *statsHistory) throughput(queue string, now time.Time) (processed, failed float64) {
	b := h.recent(queue, now)
	return float64(b.processed) / 5, float64(b.failed) / 5
}

// recent sums the last five minutes (the current one included) for queue ("" for all).
func (h *statsHistory) recent(queue string, now time.Time) *statBucket {
	minute := now.Unix() / 60
	var b statBucket
	h.mu.Lock()
	if h.minutes != nil {
		h.sum(false, minute-4, minute+1, queue, &b)
	}
	h.mu.Unlock()
	return &b
}

// queueActivity returns the "throughput" and "latency_ms" objects of a queue (or of all, for "")
// over the last five minutes: jobs processed and attempts failed per minute, and the p50, p95 and
// p99 run times (null without attempts).
func (h *statsHistory) queueActivity(queue string, now time.Time) (throughput, latency map[string]any) {
	b := h.recent(queue, now)
	throughput = map[string]any{"processed_per_minute": float64(b.processed) / 5, "failed_per_minute": float64(b.failed) / 5}
	latency = map[string]any{}
	for _, p := range []struct {
		key string
		q   float64
	}{{"p50", 0.5}, {"p95", 0.95}, {"p99", 0.99}} {
		if v := b.percentileMS(p.q); v >= 0 {
			latency[p.key] = v
		} else {
			latency[p.key] = nil
		}
	}
	return throughput, latency
}

// historyPeriods are the periods GET /admin/stats/history accepts, in minutes.
var historyPeriods = map[string]int64{"1m": 1, "5m": 5, "15m": 15, "1h": 60, "1d": 1440}

// GET /ojs/v1/admin/stats/history?period=&since=&until=&queue=: the counts of each period from since
// (rounded down to a period) to until: {"period", "since", "until", "queue"?, "data": [{"timestamp",
// "processed", "failed", "enqueued", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"}]} with
// null percentiles for a period without attempts.
func (s *Server) adminStatsHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	period := q.Get("period")
	if period == "" {
		period = "5m"
	}
	step, ok := historyPeriods[period]
	if !ok {
		s.writeError(w, r, invalid("period", "period %q: use 1m, 5m, 15m, 1h or 1d", period))
		return
	}
	now := time.Now().UTC()
	until, since := now, now.Add(-time.Hour)
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				s.writeError(w, r, invalid(p.name, "%s %q: an RFC 3339 time, as 2026-02-13T11:50:00Z", p.name, v))
				return
			}
			*p.into = t.UTC()
		}
	}
	if !since.Before(until) {
		s.writeError(w, r, invalid("since", "since (%s) must be before until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339)))
		return
	}
	queue := q.Get("queue")
	if queue != "" {
		if e := checkQueueName(queue); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	hourly := step >= 60
	retention := StatsMinuteRetention
	if hourly {
		retention = StatsHourRetention
	}
	if since.Before(now.Add(-retention)) {
		since = now.Add(-retention) // nothing older is kept; this also bounds the points (1441 at most)
	}
	if until.After(now) {
		until = now
	}
	from := since.Unix() / 60 / step * step // unix minutes, rounded down to a period
	to := until.Unix() / 60
	if until.Before(since) {
		// The range lies wholly after now or before the retention: nothing is kept for it.
		to = from - 1
	}
	data := make([]map[string]any, 0, (to-from)/step+1)
	s.history.mu.Lock()
	for start := from; start <= to; start += step {
		var b statBucket
		if s.history.minutes != nil {
			if hourly {
				s.history.sum(true, start/60, (start+step)/60, queue, &b)
			} else {
				s.history.sum(false, start, start+step, queue, &b)
			}
		}
		point := map[string]any{"timestamp": time.Unix(start*60, 0).UTC().Format(time.RFC3339),
			"processed": b.processed, "failed": b.failed, "enqueued": b.enqueued}
		for _, p := range []struct {
			key string
			q   float64
		}{{"latency_p50_ms", 0.5}, {"latency_p95_ms", 0.95}, {"latency_p99_ms", 0.99}} {
			if v := b.percentileMS(p.q); v >= 0 {
				point[p.key] = v
			} else {
				point[p.key] = nil
			}
		}
		data = append(data, point)
	}
	s.history.mu.Unlock()
	out := map[string]any{"period": period, "since": time.Unix(from*60, 0).UTC().Format(time.RFC3339),
		"until": until.Format(time.RFC3339), "data": data}
	if queue != "" {
		out["queue"] = queue
	}
	writeJSONValue(w, http.StatusOK, out)
}

// recordOutcome counts a client event in the history.
func (s *Server) recordOutcome(ev *pronto.Event, attemptFailed bool) {
	switch {
	case ev.Kind == pronto.EventCompleted:
		s.history.record(statProcessed, ev.Job.Queue, ev.At, ev.Duration)
	case attemptFailed:
		s.history.record(statFailed, ev.Job.Queue, ev.At, ev.Duration)
	}
}
