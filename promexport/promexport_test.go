package promexport_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
)

type okArgs struct{}

func (okArgs) Kind() string { return "metrics.ok" }

type failArgs struct{}

func (failArgs) Kind() string { return "metrics.fail" }

type snoozeArgs struct{}

func (snoozeArgs) Kind() string { return "metrics.snooze" }

// scrape fetches url and returns its sample lines as name{labels} -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return parseSamples(t, resp.Body)
}

func parseSamples(t *testing.T, r io.Reader) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

func TestMetricsRoundTrip(t *testing.T) {
	ctx := context.Background()
	var snoozed atomic.Bool
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[okArgs]) error { return nil }))
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[failArgs]) error {
		return errors.New("boom")
	}))
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[snoozeArgs]) error {
		if snoozed.CompareAndSwap(false, true) {
			return pronto.Snooze(time.Millisecond)
		}
		return nil
	}))
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	cfg := &pronto.Config{
		Queues:      map[string]pronto.QueueConfig{"default": {MaxWorkers: 3}, "mail": {MaxWorkers: 2}},
		Workers:     workers,
		RetryPolicy: pronto.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
	}
	m.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	detach := m.Attach(client)
	defer detach()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)
	for range 3 {
		_, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: "mail"})
		require.NoError(t, err)
	}
	_, err = client.Insert(ctx, failArgs{}, nil)
	require.NoError(t, err)
	_, err = client.Insert(ctx, snoozeArgs{}, nil)
	require.NoError(t, err)

	want := map[string]float64{
		`ojs_job_enqueued_total{queue="mail",type="metrics.ok"}`:                                3,
		`ojs_job_enqueued_total{queue="default",type="metrics.fail"}`:                           1,
		`ojs_job_completed_total{queue="mail",type="metrics.ok"}`:                               3,
		`ojs_job_completed_total{queue="default",type="metrics.snooze"}`:                        1,
		`pronto_job_claimed_total{queue="mail",type="metrics.ok"}`:                              3,
		`pronto_job_claimed_total{queue="default",type="metrics.fail"}`:                         2,
		`pronto_job_claimed_total{queue="default",type="metrics.snooze"}`:                       2,
		`pronto_job_attempts_failed_total{queue="default",type="metrics.fail"}`:                 2,
		`ojs_job_retried_total{queue="default",type="metrics.fail"}`:                            1,
		`ojs_job_failed_total{queue="default",type="metrics.fail"}`:                             1,
		`pronto_job_snoozed_total{queue="default",type="metrics.snooze"}`:                       1,
		`ojs_job_duration_seconds_count{queue="mail",state="completed",type="metrics.ok"}`:      3,
		`ojs_job_duration_seconds_count{queue="default",state="discarded",type="metrics.fail"}`: 1,
		`ojs_job_duration_seconds_count{queue="default",state="retryable",type="metrics.fail"}`: 1,
		`ojs_job_queue_time_seconds_count{queue="mail",type="metrics.ok"}`:                      3,
		`pronto_job_pickup_latency_seconds_count{queue="default",type="metrics.fail"}`:          2,
		`pronto_job_turnaround_seconds_count{queue="mail",type="metrics.ok"}`:                   3,
		`ojs_queue_depth{queue="mail",state="completed"}`:                                       3,
		`ojs_queue_depth{queue="mail",state="available"}`:                                       0,
		`ojs_queue_depth{queue="default",state="discarded"}`:                                    1,
		`ojs_queue_depth{queue="default",state="completed"}`:                                    1,
		`ojs_workers_busy{queue="mail"}`:                                                        0,
		`pronto_workers_free{queue="mail"}`:                                                     2,
		`pronto_workers_free{queue="default"}`:                                                  3,
		`ojs_workers_active`:                                                                    0,
		`pronto_completer_backlog`:                                                              0,
		`pronto_client_started`:                                                                 1,
	}
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = scrape(t, srv.URL)
		mismatch := ""
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				mismatch = k
				break
			}
		}
		if mismatch == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series %s: want %v, scrape had %v (present: %v)", mismatch, want[mismatch], got[mismatch], func() bool { _, ok := got[mismatch]; return ok }())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// No series carries a job id or an error message.
	for k := range got {
		require.NotContains(t, k, "boom")
		require.NotContains(t, k, "id=")
	}
	leader, ok := got["pronto_leader"]
	require.True(t, ok)
	require.Contains(t, []float64{0, 1}, leader)
}

// TestGaugesOneQueryPerCacheTTL: several scrapes within the cache's TTL cost one job-count query.
func TestGaugesOneQueryPerCacheTTL(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: memory.New()}
	client, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	_, err = client.Insert(ctx, okArgs{}, nil)
	require.NoError(t, err)
	m := promexport.New(&promexport.Options{CacheTTL: time.Hour})
	defer m.Attach(client)()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for range 5 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "ojs_queue_depth" {
				found = true
				require.Len(t, mf.GetMetric(), 8) // one queue, eight states
			}
		}
		require.True(t, found)
	}
	require.EqualValues(t, 1, st.lists.Load())
}

// countingStore counts ListQueues calls, to show the cache serves several scrapes with one query.
type countingStore struct {
	*memory.Store
	lists atomic.Int64
}

func (s *countingStore) ListQueues(ctx context.Context) ([]pronto.QueueInfo, error) {
	s.lists.Add(1)
	return s.Store.ListQueues(ctx)
}

// slowListStore is a memory store whose ListQueues (a scrape's job-count query), once armed, waits
// until released: a store slow to answer a scrape.
type slowListStore struct {
	*memory.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *slowListStore) ListQueues(ctx context.Context) ([]pronto.QueueInfo, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.ListQueues(ctx)
}

// TestCountersFollowEventsDuringSlowScrape: the counters follow the client's events, which a
// subscriber must take as they come (its buffer holds 1000, the rest are dropped). A scrape waiting
// on a slow job-count query (up to Options.QueryTimeout) must not hold up the event loop: 1500 jobs
// cancelled during one such scrape all count. The scrape used to hold the lock the event loop takes
// for every event, for the whole query, so the events past the buffer were lost.
func TestCountersFollowEventsDuringSlowScrape(t *testing.T) {
	ctx := context.Background()
	st := &slowListStore{Store: memory.New(), entered: make(chan struct{}), release: make(chan struct{})}
	client, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	const n = 1500
	params := make([]pronto.InsertManyParams, n)
	for i := range params {
		params[i] = pronto.InsertManyParams{Args: okArgs{}}
	}
	rows, err := client.InsertMany(ctx, params)
	require.NoError(t, err)

	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond, QueryTimeout: time.Minute})
	defer m.Attach(client)()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	ms := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ms.Close()

	st.armed.Store(true)
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		_, _ = reg.Gather()
	}()
	<-st.entered
	for i, j := range rows {
		_, err := client.JobCancel(ctx, j.ID)
		require.NoError(t, err)
		if i%250 == 249 {
			// Pacing: a quarter of the buffer at a time, so only a stopped event loop, not this
			// loop outrunning it, can fill the buffer.
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(st.release)
	<-scraped

	series := `ojs_job_cancelled_total{queue="default",type="metrics.ok"}`
	var got map[string]float64
	require.Eventually(t, func() bool {
		got = scrape(t, ms.URL)
		return got[series]+got["pronto_events_dropped_total"] >= n
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, float64(n), got[series], "jobs cancelled during a slow scrape (events dropped: %v)",
		got["pronto_events_dropped_total"])
}

// TestNotifierConnectedOnPostgres: on PostgreSQL the listener's state is a gauge; a started client's
// listener connects.
func TestNotifierConnectedOnPostgres(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	defer st.Close()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[okArgs]) error { return nil }))
	client, err := pronto.NewClient(st, &pronto.Config{Queues: map[string]pronto.QueueConfig{"default": {MaxWorkers: 1}}, Workers: workers})
	require.NoError(t, err)
	m := promexport.New(nil)
	defer m.Attach(client)()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)
	require.Eventually(t, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "pronto_notifier_connected" {
				return mf.GetMetric()[0].GetGauge().GetValue() == 1
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
}

type stallArgs struct{}

func (stallArgs) Kind() string { return "metrics.stall" }

// waitSeries scrapes until every series in want has its value.
func waitSeries(t *testing.T, url string, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := scrape(t, url)
		mismatch := ""
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				mismatch = k
				break
			}
		}
		if mismatch == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("series %s: want %v, scrape had %v", mismatch, want[mismatch], got[mismatch])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProgressMetrics: progress writes are counted, a stall is counted and shows in the stalled-jobs
// gauge until the job's outcome.
func TestProgressMetrics(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[stallArgs]) error {
		if err := pronto.ReportProgress(ctx, 0.5, nil); err != nil {
			return pronto.Discard(err)
		}
		<-release
		return nil
	}))
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{"default": {MaxWorkers: 1}}, Workers: workers,
		ProgressStallTimeout: 50 * time.Millisecond}
	m.Instrument(cfg)
	client, err := pronto.NewClient(memory.New(), cfg)
	require.NoError(t, err)
	detach := m.Attach(client)
	defer detach()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)
	_, err = client.Insert(ctx, stallArgs{}, nil)
	require.NoError(t, err)
	waitSeries(t, srv.URL, map[string]float64{
		`ojs_progress_updates_total{queue="default",type="metrics.stall"}`:    1,
		`pronto_progress_stalled_total{queue="default",type="metrics.stall"}`: 1,
		`ojs_progress_stalled_jobs{queue="default"}`:                          1,
	})
	close(release)
	waitSeries(t, srv.URL, map[string]float64{
		`ojs_progress_stalled_jobs{queue="default"}`:                       0,
		`ojs_job_completed_total{queue="default",type="metrics.stall"}`:    1,
		`ojs_progress_updates_total{queue="default",type="metrics.stall"}`: 1,
	})
}

// TestStalledGaugeForgetsJobsEndedElsewhere: a stall reported through this client (an OJS worker's
// progress) whose job another client completes leaves the gauge at the next scrape.
func TestStalledGaugeForgetsJobsEndedElsewhere(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	a, err := pronto.NewClient(st, &pronto.Config{ProgressStallTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	b, err := pronto.NewClient(st, &pronto.Config{})
	require.NoError(t, err)
	detach := m.Attach(a)
	defer detach()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	job, err := a.Insert(ctx, stallArgs{}, &pronto.InsertOpts{Queue: "remote"})
	require.NoError(t, err)
	fetched, err := a.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"remote"}, WorkerID: "ojs-1"})
	require.NoError(t, err)
	require.Len(t, fetched, 1)
	half := 0.5
	_, err = a.JobProgressReport(ctx, job.ID, &half, nil)
	require.NoError(t, err)
	waitSeries(t, srv.URL, map[string]float64{`ojs_progress_stalled_jobs{queue="remote"}`: 1})
	_, err = b.RemoteAck(ctx, pronto.RemoteAckParams{ID: job.ID, WorkerID: "ojs-1"})
	require.NoError(t, err)
	waitSeries(t, srv.URL, map[string]float64{`ojs_progress_stalled_jobs{queue="remote"}`: 0})
}

type wfArgs struct{}

func (wfArgs) Kind() string { return "metrics.wf" }

type markerArgs struct{}

func (markerArgs) Kind() string { return "metrics.marker" }

// instrumented returns a client on a memory store with m instrumenting it and attached, and the URL
// of a registry serving m.
func instrumented(t *testing.T, cfg *pronto.Config) (*pronto.Client, string) {
	t.Helper()
	return instrumentedOn(t, memory.New(), cfg)
}

// instrumentedOn is instrumented on st.
func instrumentedOn(t *testing.T, st store.Store, cfg *pronto.Config) (*pronto.Client, string) {
	t.Helper()
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	m.Instrument(cfg)
	client, err := pronto.NewClient(st, cfg)
	require.NoError(t, err)
	t.Cleanup(m.Attach(client))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return client, srv.URL
}

// scrapeAfterMarker cancels a queued marker job (a queue and type of its own) and scrapes once the
// exporter has counted that cancel: events reach it in order, so every event emitted before has
// been counted by then (and a count too many would show).
func scrapeAfterMarker(t *testing.T, c *pronto.Client, url string) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	j, err := c.Insert(ctx, markerArgs{}, &pronto.InsertOpts{Queue: "marker"})
	require.NoError(t, err)
	_, err = c.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	waitSeries(t, url, map[string]float64{`ojs_job_cancelled_total{queue="marker",type="metrics.marker"}`: 1})
	return scrape(t, url)
}

// TestWorkflowJobsCountedAsEnqueued: a workflow's jobs, its callbacks included, are inserted through
// the insert middleware and counted in ojs_job_enqueued_total when the workflow is inserted.
func TestWorkflowJobsCountedAsEnqueued(t *testing.T) {
	ctx := context.Background()
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfArgs]) error { return nil }))
	client, url := instrumented(t, &pronto.Config{Queues: map[string]pronto.QueueConfig{"wfq": {MaxWorkers: 2}}, Workers: workers})
	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)

	opts := &pronto.InsertOpts{Queue: "wfq"}
	w := pronto.NewWorkflow("counted").Add("a", wfArgs{}, opts).Add("b", wfArgs{}, opts, "a").
		OnComplete(pronto.WorkflowJob{Args: wfArgs{}, Opts: opts})
	_, err := client.WorkflowInsert(ctx, w)
	require.NoError(t, err)
	waitSeries(t, url, map[string]float64{
		`ojs_job_completed_total{queue="wfq",type="metrics.wf"}`: 3,
		`ojs_job_enqueued_total{queue="wfq",type="metrics.wf"}`:  3,
	})
}

// TestCancelOfRemoteHeldJobCounted: an operator cancels a job an OJS worker fetched through this
// client. No pronto client runs it to report the cancel (the worker learns of it on its next
// heartbeat, which reports nothing), so the cancelling client counts it, once.
func TestCancelOfRemoteHeldJobCounted(t *testing.T) {
	ctx := context.Background()
	client, url := instrumented(t, &pronto.Config{})
	j, err := client.Insert(ctx, okArgs{}, &pronto.InsertOpts{Queue: "remote"})
	require.NoError(t, err)
	fetched, err := client.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"remote"}, WorkerID: "ojs-w1"})
	require.NoError(t, err)
	require.Len(t, fetched, 1)
	row, err := client.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pronto.StateCancelled, row.State)
	lost, err := client.RemoteHeartbeat(ctx, "ojs-w1", []string{j.ID}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, lost)

	got := scrapeAfterMarker(t, client, url)
	require.Equal(t, 1.0, got[`pronto_job_claimed_total{queue="remote",type="metrics.ok"}`])
	require.Equal(t, 1.0, got[`ojs_job_cancelled_total{queue="remote",type="metrics.ok"}`])
}

// TestWorkflowCancelCounted: WorkflowCancel (DELETE /ojs/v1/workflows/{id}) counts each job it
// cancelled once: the queued ones and one an OJS worker holds by this client, the one this client
// runs by that run's own report.
func TestWorkflowCancelCounted(t *testing.T) {
	ctx := context.Background()
	started := make(chan struct{}, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}))
	client, url := instrumented(t, &pronto.Config{Queues: map[string]pronto.QueueConfig{"wfrun": {MaxWorkers: 1}}, Workers: workers})
	require.NoError(t, client.Start(ctx))
	defer client.Stop(ctx)

	// "run" runs on this client; "remote" is fetched by an OJS worker; "a" and "b" wait.
	run, remote, waiting := &pronto.InsertOpts{Queue: "wfrun"}, &pronto.InsertOpts{Queue: "wfremote"}, &pronto.InsertOpts{Queue: "wfc"}
	res, err := client.WorkflowInsert(ctx, pronto.NewWorkflow("cancelled").Add("run", wfArgs{}, run).
		Add("remote", wfArgs{}, remote).Add("a", wfArgs{}, waiting).Add("b", wfArgs{}, waiting, "a"))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the step never started")
	}
	fetched, err := client.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"wfremote"}, WorkerID: "ojs-w1"})
	require.NoError(t, err)
	require.Len(t, fetched, 1)
	require.Equal(t, res.Jobs["remote"].ID, fetched[0].ID)

	_, err = client.WorkflowCancel(ctx, res.Workflow.ID)
	require.NoError(t, err)
	for _, name := range res.Order {
		j, err := client.JobGet(ctx, res.Jobs[name].ID)
		require.NoError(t, err)
		require.Equal(t, pronto.StateCancelled, j.State, "step %s", name)
	}
	waitSeries(t, url, map[string]float64{`ojs_job_cancelled_total{queue="wfrun",type="metrics.wf"}`: 1})
	got := scrapeAfterMarker(t, client, url)
	require.Equal(t, 1.0, got[`ojs_job_cancelled_total{queue="wfrun",type="metrics.wf"}`], "the run reports its own, once")
	require.Equal(t, 1.0, got[`ojs_job_cancelled_total{queue="wfremote",type="metrics.wf"}`])
	require.Equal(t, 2.0, got[`ojs_job_cancelled_total{queue="wfc",type="metrics.wf"}`])
}

// TestCancelOfJobRunElsewhereCountedOnce: a job a pronto client runs is cancelled through another
// client of the store (another process, say): the run reports its cancel, in its own process, and
// the cancelling client does not count it too.
func TestCancelOfJobRunElsewhereCountedOnce(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	started := make(chan string, 1)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[wfArgs]) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	}))
	runner, runnerURL := instrumentedOn(t, st, &pronto.Config{Queues: map[string]pronto.QueueConfig{"elsewhere": {MaxWorkers: 1}}, Workers: workers})
	require.NoError(t, runner.Start(ctx))
	defer runner.Stop(ctx)
	admin, adminURL := instrumentedOn(t, st, &pronto.Config{})

	j, err := admin.Insert(ctx, wfArgs{}, &pronto.InsertOpts{Queue: "elsewhere"})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job never started")
	}
	require.Eventually(t, func() bool { // the runner is in the store's registry of live clients
		list, err := admin.ClientList(ctx)
		return err == nil && len(list) == 1
	}, 20*time.Second, 10*time.Millisecond)
	_, err = admin.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	waitSeries(t, runnerURL, map[string]float64{`ojs_job_cancelled_total{queue="elsewhere",type="metrics.wf"}`: 1})
	got := scrapeAfterMarker(t, admin, adminURL)
	require.Zero(t, got[`ojs_job_cancelled_total{queue="elsewhere",type="metrics.wf"}`], "counted by the run's process only")
}
