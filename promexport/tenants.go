package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pronto-jobs/pronto"
)

// Per-tenant series (ojs-multi-tenancy.md §11.2, MT-006), exported only with Options.TenantLabels:
//
//	ojs_tenant_jobs_enqueued_total{tenant_id, queue}   jobs of the tenant inserted by this process
//	ojs_tenant_jobs_processed_total{tenant_id, queue}  jobs of the tenant completed on this process
//	ojs_tenant_jobs_failed_total{tenant_id, queue}     jobs of the tenant discarded on this process
//	ojs_tenant_jobs{tenant_id, state}                  the tenant's jobs per state across queues, from
//	                                                   the store (Client.TenantList, cached CacheTTL)
//
// They are separate series beside the unlabelled ones, so turning the option on or off never changes
// the labels of an existing series (dashboards and alerts keep working). Jobs without a tenant are
// not counted in them. Each tenant adds a series per queue it uses to each counter and one per state
// to the gauge: with many tenants (thousands) that is a cardinality cost for Prometheus, which is why
// the option is off by default. Tenant ids come from whoever enqueues, as queue names do, so tenant_id
// takes at most Options.MaxLabelValues values like queue (the rest as OtherLabel, their jobs summed
// under it in the gauge), and queue is bounded as on every series.

// tenantMetrics are the per-tenant series; nil fields when Options.TenantLabels is off.
type tenantMetrics struct {
	enqueued, processed, failed *prometheus.CounterVec
	jobs                        *prometheus.Desc

	cached storeCache[*pronto.TenantInfo] // the tenants' job counts (TenantList)
}

func newTenantMetrics() *tenantMetrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"tenant_id", "queue"})
	}
	return &tenantMetrics{
		enqueued:  counter("ojs_tenant_jobs_enqueued_total", "Jobs of a tenant inserted by this process (duplicates a unique key turned away are not counted)."),
		processed: counter("ojs_tenant_jobs_processed_total", "Jobs of a tenant that reached the completed state on this process."),
		failed:    counter("ojs_tenant_jobs_failed_total", "Jobs of a tenant that reached the discarded state on this process (failed for good)."),
		jobs: prometheus.NewDesc("ojs_tenant_jobs", "A tenant's jobs per state across queues, as the store holds them (cached for a few seconds).",
			[]string{"tenant_id", "state"}, nil),
	}
}

// tenantCollectors returns the per-tenant vectors (none when the option is off).
func (m *Metrics) tenantCollectors() []prometheus.Collector {
	if m.tenant == nil {
		return nil
	}
	return []prometheus.Collector{m.tenant.enqueued, m.tenant.processed, m.tenant.failed}
}

// tenantDescs returns the per-tenant gauge descriptions (none when the option is off).
func (m *Metrics) tenantDescs() []*prometheus.Desc {
	if m.tenant == nil {
		return nil
	}
	return []*prometheus.Desc{m.tenant.jobs}
}

// tenantInserted counts an inserted job of a tenant.
func (m *Metrics) tenantInserted(r *pronto.JobRow) {
	if m.tenant != nil && r.Tenant != "" {
		m.tenant.enqueued.WithLabelValues(m.tenantLabels.value(r.Tenant), m.queueLabels.value(r.Queue)).Inc()
	}
}

// tenantObserve counts a tenant's completed or discarded job.
func (m *Metrics) tenantObserve(e *pronto.Event) {
	if m.tenant == nil || e.Job == nil || e.Job.Tenant == "" {
		return
	}
	var v *prometheus.CounterVec
	switch e.Kind {
	case pronto.EventCompleted:
		v = m.tenant.processed
	case pronto.EventDiscarded:
		v = m.tenant.failed
	default:
		return
	}
	v.WithLabelValues(m.tenantLabels.value(e.Job.Tenant), m.queueLabels.value(e.Job.Queue)).Inc()
}

// collectTenants sends the tenant gauges: one TenantList per CacheTTL, the tenants past the label
// bound summed under OtherLabel. A failed query counts a scrape error and sends none.
func (m *Metrics) collectTenants(ch chan<- prometheus.Metric, c *pronto.Client) {
	if m.tenant == nil {
		return
	}
	tenants, err := m.tenant.cached.get(c, m.opts, c.TenantList)
	if err != nil {
		m.scrapeErrors.Inc()
		return
	}
	byLabel := make(map[string]map[pronto.State]int64, len(tenants))
	for _, t := range tenants {
		addStateCounts(byLabel, m.tenantLabels.value(t.Tenant), t.Counts)
	}
	for name, counts := range byLabel {
		for _, s := range allStates {
			ch <- prometheus.MustNewConstMetric(m.tenant.jobs, prometheus.GaugeValue, float64(counts[s]), name, string(s))
		}
	}
}
