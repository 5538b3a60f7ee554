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

// countingStore counts ListQueues calls, to show the cache serves several scrapes with one query.
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

type countingStore struct {
	*memory.Store
	lists atomic.Int64
}

func (s *countingStore) ListQueues(ctx context.Context) ([]pronto.QueueInfo, error) {
	s.lists.Add(1)
	return s.Store.ListQueues(ctx)
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
