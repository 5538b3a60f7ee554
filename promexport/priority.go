package promexport

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pronto-jobs/pronto"
)

// The per-priority series (ojs-priority.md §11.2), exported only with Options.PriorityLabels:
//
//	ojs_queue_available_by_priority{queue, priority}  available jobs per priority of each queue with
//	                                                  any, from the store (Client.QueueAvailableByPriority,
//	                                                  cached CacheTTL)
//
// A scrape costs one store query per queue with available jobs (beside the queue counts' one), and
// each priority in use adds a series per queue (up to 201 between PriorityMin and PriorityMax): the
// option is off by default for that cost. A priority with no available job has no series.

// queuePriorities is one queue's available jobs per priority.
type queuePriorities struct {
	queue  string
	counts map[int]int64
}

// priorityMetrics is the per-priority gauge; nil when Options.PriorityLabels is off.
type priorityMetrics struct {
	available *prometheus.Desc
	cached    storeCache[queuePriorities]
}

func newPriorityMetrics() *priorityMetrics {
	return &priorityMetrics{
		available: prometheus.NewDesc("ojs_queue_available_by_priority",
			"Available jobs per queue and priority, as the store holds them (cached for a few seconds).",
			[]string{"queue", "priority"}, nil),
	}
}

// priorityDescs returns the per-priority gauge description (none when the option is off).
func (m *Metrics) priorityDescs() []*prometheus.Desc {
	if m.prio == nil {
		return nil
	}
	return []*prometheus.Desc{m.prio.available}
}

// collectPriorities sends the per-priority gauge, the queues past the label bound summed under
// OtherLabel. A failed query counts a scrape error and sends none.
func (m *Metrics) collectPriorities(ch chan<- prometheus.Metric, c *pronto.Client) {
	if m.prio == nil {
		return
	}
	read := func(ctx context.Context) ([]queuePriorities, error) {
		qs, err := c.QueueList(ctx)
		if err != nil {
			return nil, err
		}
		var out []queuePriorities
		for _, q := range qs {
			if q.Counts[pronto.StateAvailable] == 0 {
				continue
			}
			counts, err := c.QueueAvailableByPriority(ctx, q.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, queuePriorities{queue: q.Name, counts: counts})
		}
		return out, nil
	}
	qs, err := m.prio.cached.get(c, m.opts, read)
	if err != nil {
		m.scrapeErrors.Inc()
		return
	}
	byLabel := make(map[string]map[int]int64, len(qs))
	for _, q := range qs {
		name := m.queueLabels.value(q.queue)
		sum := byLabel[name]
		if sum == nil {
			sum = make(map[int]int64, len(q.counts))
			byLabel[name] = sum
		}
		for p, n := range q.counts {
			sum[p] += n
		}
	}
	for name, counts := range byLabel {
		for p, n := range counts {
			ch <- prometheus.MustNewConstMetric(m.prio.available, prometheus.GaugeValue, float64(n), name, strconv.Itoa(p))
		}
	}
}
