package promexport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestLabelValuesBounded: job types and queues come from whoever enqueues (any client of the HTTP
// API), and counter series are never dropped: the queue and type labels each export at most
// Options.MaxLabelValues values, the rest as "other", so one client cannot grow /metrics without
// bound. They used to take every value sent.
func TestLabelValuesBounded(t *testing.T) {
	m := promexport.New(&promexport.Options{CacheTTL: time.Millisecond})
	cfg := &pronto.Config{}
	m.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	defer m.Attach(client)()
	srv, err := server.New(server.Config{Client: client})
	require.NoError(t, err)
	defer srv.Close()
	api := httptest.NewServer(srv)
	defer api.Close()

	const n = 3000
	for b := 0; b < n/1000; b++ {
		var jobs []string
		for i := 0; i < 1000; i++ {
			k := b*1000 + i
			jobs = append(jobs, fmt.Sprintf(`{"type":"attacker.t%d","args":[],"options":{"queue":"q%d"}}`, k, k))
		}
		resp, err := http.Post(api.URL+"/ojs/v1/jobs/batch", "application/json", strings.NewReader(`{"jobs":[`+strings.Join(jobs, ",")+`]}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "batch enqueue")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ms := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ms.Close()
	samples := scrape(t, ms.URL)
	types, queues := map[string]bool{}, map[string]bool{}
	typeRe, queueRe := regexp.MustCompile(`type="([^"]*)"`), regexp.MustCompile(`queue="([^"]*)"`)
	for s := range samples {
		if x := typeRe.FindStringSubmatch(s); x != nil {
			types[x[1]] = true
		}
		if x := queueRe.FindStringSubmatch(s); x != nil {
			queues[x[1]] = true
		}
	}
	t.Logf("%d samples on /metrics after %d enqueues by one client", len(samples), n)
	if !types[promexport.OtherLabel] || !queues[promexport.OtherLabel] ||
		len(types) > promexport.DefaultMaxLabelValues+1 || len(queues) > promexport.DefaultMaxLabelValues+1 {
		t.Errorf("one HTTP client made %d distinct type labels and %d distinct queue labels (%d samples) with %d enqueues: label cardinality is unbounded",
			len(types), len(queues), len(samples), n)
	}
}

// TestQueueDepthSeriesStay: ojs_queue_depth reports every state of a queue this client works, zeros
// included, also once the queue's last job is deleted and the store lists it no more; its series
// used to vanish then.
func TestQueueDepthSeriesStay(t *testing.T) {
	ctx := context.Background()
	m := promexport.New(&promexport.Options{CacheTTL: time.Millisecond})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[okArgs]) error { return nil }))
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{"vanish": {MaxWorkers: 1}}, Workers: workers}
	m.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	defer m.Attach(client)()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ms := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ms.Close()

	j, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: "vanish"})
	require.NoError(t, err)
	const series = `ojs_queue_depth{queue="vanish",state="available"}`
	before := scrape(t, ms.URL)
	require.Contains(t, before, series)
	_, err = client.JobDelete(ctx, j.ID)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // past CacheTTL
	after := scrape(t, ms.URL)
	if _, ok := after[series]; !ok {
		t.Errorf("%s vanished once the queue's last job was deleted (want 0); busy gauge present: %v",
			series, has(after, `ojs_workers_busy{queue="vanish"}`))
	}
}

func has(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// TestRemoteDiscardNotLeaseExpiry: an OJS worker's nack that discards a job counts as a failed
// attempt, not as a lease expiry, even when the database's clock (which set started_at) runs ahead
// of this host's, which makes the attempt's measured duration 0: the rescuer's discards are told by
// their ErrJobLost. The job below is the fetched row with started_at 2 s ahead.
func TestRemoteDiscardNotLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	client, url := instrumented(t, &pronto.Config{})

	_, err := client.Insert(ctx, failArgs{}, nil)
	require.NoError(t, err)
	jobs, err := client.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{pronto.DefaultQueue}, WorkerID: "w1"})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	j := *jobs[0]
	j.StartedAt = j.StartedAt.Add(2 * time.Second) // the database's clock
	_, err = client.RemoteNack(ctx, pronto.RemoteNackParams{ID: j.ID, WorkerID: "w1", ClaimToken: j.ClaimToken, Attempt: j.Attempt,
		Error: pronto.AttemptError{Message: "boom"}, NonRetryable: true, Job: &j})
	require.NoError(t, err)

	lbl := `{queue="default",type="metrics.fail"}`
	deadline := time.Now().Add(5 * time.Second)
	var s map[string]float64
	for {
		s = scrape(t, url)
		if s["ojs_job_failed_total"+lbl] == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 1.0, s["ojs_job_failed_total"+lbl])
	if s["pronto_job_lease_expired_discarded_total"+lbl] != 0 || s["pronto_job_attempts_failed_total"+lbl] != 1 {
		t.Errorf("a worker's nack discarding the job: lease_expired_discarded=%v attempts_failed=%v, want 0 and 1",
			s["pronto_job_lease_expired_discarded_total"+lbl], s["pronto_job_attempts_failed_total"+lbl])
	}
}

// TestExpiredNotAnAttempt: a job discarded because it expired before it started counts as
// discarded (and added to the dead letter queue), not as a failed attempt nor a lease expiry, and
// observes no attempt duration.
func TestExpiredNotAnAttempt(t *testing.T) {
	ctx := context.Background()
	client, url := instrumented(t, &pronto.Config{})

	row, err := client.Insert(ctx, failArgs{}, &pronto.InsertOpts{ExpiresAt: time.Now().Add(10 * time.Millisecond)})
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	j, err := client.JobCatchUp(ctx, row)
	require.NoError(t, err)
	require.Equal(t, pronto.StateDiscarded, j.State)

	lbl := `{queue="default",type="metrics.fail"}`
	deadline := time.Now().Add(5 * time.Second)
	var s map[string]float64
	for {
		s = scrape(t, url)
		if s["ojs_job_failed_total"+lbl] == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 1.0, s["ojs_job_failed_total"+lbl])
	require.Equal(t, 1.0, s["ojs_dead_letter_added_total"+lbl])
	require.Zero(t, s["pronto_job_attempts_failed_total"+lbl], "no attempt ran")
	require.Zero(t, s["pronto_job_lease_expired_discarded_total"+lbl])
	require.Zero(t, s[`ojs_job_duration_seconds_count{queue="default",state="discarded",type="metrics.fail"}`], "no attempt duration")
}

// TestSchedulingQueueLabelBounded: the scheduling series (fed by every OJS fetch on pronto serve)
// take the queue label through the same bound as the others, ratio included: the queues past
// MaxLabelValues are counted as "other".
func TestSchedulingQueueLabelBounded(t *testing.T) {
	const max = 2
	m := promexport.New(&promexport.Options{MaxLabelValues: max})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	for _, q := range []string{"qa", "qb", "qc", "qd", "qe", "qf"} {
		m.ObserveDispatch(q, "", time.Second)
		m.ObserveStarvation(q, "p")
	}
	got := scrape(t, srv.URL)
	for _, series := range []string{"ojs_scheduling_dispatch_total", "ojs_scheduling_dispatch_ratio",
		"ojs_scheduling_queue_wait_duration_seconds_count", "ojs_scheduling_starvation_events_total"} {
		re := regexp.MustCompile(`^` + series + `\{.*queue="([^"]*)"`)
		queues := map[string]bool{}
		for s := range got {
			if x := re.FindStringSubmatch(s); x != nil {
				queues[x[1]] = true
			}
		}
		require.Equal(t, map[string]bool{"qa": true, "qb": true, promexport.OtherLabel: true}, queues, series)
	}
	require.Equal(t, 4.0, got[`ojs_scheduling_dispatch_total{pool="",queue="other"}`])
	require.InDelta(t, 4.0/6, got[`ojs_scheduling_dispatch_ratio{queue="other"}`], 1e-9)
}

// TestTenantLabelsBounded: with Options.TenantLabels, the per-tenant series take the queue label
// through the same bound as every series, and tenant_id through a bound of its own (tenants, like
// queues, come from whoever enqueues): past MaxLabelValues both are "other", the gauge's tenants
// summed under it. The per-tenant counters used to take both raw, one series per queue and tenant
// ever enqueued into.
func TestTenantLabelsBounded(t *testing.T) {
	ctx := context.Background()
	const max = 3
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond, TenantLabels: true, MaxLabelValues: max})
	cfg := &pronto.Config{}
	m.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	defer m.Attach(client)()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	const n = 20
	for i := range n {
		_, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: fmt.Sprintf("q%d", i), Tenant: fmt.Sprintf("t%d", i)})
		require.NoError(t, err)
	}
	got := scrape(t, srv.URL)
	values := func(series, label string) map[string]bool {
		re := regexp.MustCompile(`^` + series + `\{.*` + label + `="([^"]*)"`)
		vs := map[string]bool{}
		for s := range got {
			if x := re.FindStringSubmatch(s); x != nil {
				vs[x[1]] = true
			}
		}
		return vs
	}
	first := map[string]bool{"q0": true, "q1": true, "q2": true, promexport.OtherLabel: true}
	require.Equal(t, first, values("ojs_job_enqueued_total", "queue"))
	require.Equal(t, first, values("ojs_tenant_jobs_enqueued_total", "queue"), "the same queue values as every series")
	require.Equal(t, map[string]bool{"t0": true, "t1": true, "t2": true, promexport.OtherLabel: true},
		values("ojs_tenant_jobs_enqueued_total", "tenant_id"))
	require.Equal(t, float64(n-max), got[`ojs_tenant_jobs_enqueued_total{queue="other",tenant_id="other"}`])
	require.Len(t, values("ojs_tenant_jobs", "tenant_id"), max+1)
	require.Equal(t, float64(n-max), got[`ojs_tenant_jobs{state="available",tenant_id="other"}`],
		"the tenants past the bound summed under other")
}
