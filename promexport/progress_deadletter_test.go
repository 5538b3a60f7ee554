package promexport_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/promexport"
	"github.com/pronto-jobs/pronto/store"
)

// openStore opens a fresh, migrated store of the given kind, closed when the test ends.
func openStore(t *testing.T, kind string) store.Store { return teststore.Open(t, kind) }

type checkpointArgs struct{}

func (checkpointArgs) Kind() string { return "metrics.checkpoint" }

type deadArgs struct{}

func (deadArgs) Kind() string { return "metrics.dead" }

// TestProgressCompletedCheckpointAndDeadLetterMetrics: on every store, a job that reported progress
// and saved a checkpoint counts in pronto_progress_completed_total and
// ojs_progress_checkpoint_size_bytes; a job without progress does not; a discarded job counts in
// ojs_dead_letter_added_total and ojs_dead_letter_total, and its retry in ojs_dead_letter_retried_total.
func TestProgressCompletedCheckpointAndDeadLetterMetrics(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var failed atomic.Bool
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[checkpointArgs]) error {
				if err := pronto.SaveCheckpoint(ctx, map[string]string{"offset": "0123456789"}); err != nil { // 23 bytes
					return pronto.Discard(err)
				}
				return pronto.ReportProgress(ctx, 0.5, map[string]int{"rows": 3})
			}))
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[okArgs]) error { return nil }))
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[deadArgs]) error {
				if failed.CompareAndSwap(false, true) {
					return pronto.Discard(errors.New("bad input"))
				}
				return nil
			}))
			m := promexport.New(&promexport.Options{CacheTTL: 1})
			cfg := &pronto.Config{Queues: map[string]pronto.QueueConfig{"default": {MaxWorkers: 1}}, Workers: workers}
			m.Instrument(cfg)
			client, err := pronto.NewClient(openStore(t, kind), cfg)
			require.NoError(t, err)
			defer m.Attach(client)()
			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(m))
			srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			defer srv.Close()
			require.NoError(t, client.Start(ctx))
			defer client.Stop(ctx)

			_, err = client.Insert(ctx, checkpointArgs{}, nil)
			require.NoError(t, err)
			_, err = client.Insert(ctx, okArgs{}, nil)
			require.NoError(t, err)
			dead, err := client.Insert(ctx, deadArgs{}, nil)
			require.NoError(t, err)
			waitSeries(t, srv.URL, map[string]float64{
				`pronto_progress_completed_total{queue="default",type="metrics.checkpoint"}`: 1,
				`ojs_job_completed_total{queue="default",type="metrics.ok"}`:                 1,
				`ojs_progress_checkpoint_size_bytes_count{type="metrics.checkpoint"}`:        1,
				`ojs_progress_checkpoint_size_bytes_sum{type="metrics.checkpoint"}`:          23,
				`ojs_dead_letter_added_total{queue="default",type="metrics.dead"}`:           1,
				`ojs_dead_letter_total{queue="default"}`:                                     1,
			})
			_, err = client.JobRetry(ctx, dead.ID)
			require.NoError(t, err)
			waitSeries(t, srv.URL, map[string]float64{
				`ojs_dead_letter_retried_total{queue="default"}`:                   1,
				`ojs_dead_letter_total{queue="default"}`:                           0,
				`ojs_job_completed_total{queue="default",type="metrics.dead"}`:     1,
				`ojs_dead_letter_added_total{queue="default",type="metrics.dead"}`: 1,
			})
			got := scrape(t, srv.URL)
			_, ok := got[`pronto_progress_completed_total{queue="default",type="metrics.ok"}`]
			require.False(t, ok, "a job that reported no progress counts no progress completion")
		})
	}
}
