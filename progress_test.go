package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type progressArgs struct {
	Fail bool `json:"fail"`
}

func (progressArgs) Kind() string { return "test.progress" }

// TestProgressRoundTrip: a worker's progress is visible through JobGet while it runs (throttled,
// the latest report wins), reads 1 once the job completed, is kept when the job failed, and is
// announced with EventProgress; on every store.
func TestProgressRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		release := make(chan struct{})
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[progressArgs]) error {
			if err := pronto.ReportProgress(ctx, 0.2, nil); err != nil {
				return pronto.Discard(err)
			}
			if err := pronto.ReportProgress(ctx, 0.5, map[string]int{"rows": 50}); err != nil {
				return pronto.Discard(err)
			}
			_ = pronto.ReportProgress(ctx, 0.4, nil) // lower: ignored
			if err := pronto.ReportProgress(ctx, 0.5, []int{1}); err == nil {
				return pronto.Discard(errors.New("data that is not an object was accepted"))
			}
			if j.Args.Fail {
				return errors.New("failed at half way")
			}
			<-release
			return nil
		}))
		cfg := fastConfig(workers, defaultQueue(2))
		c := startClient(t, ts, cfg)
		events, stop := c.Subscribe(pronto.EventProgress)
		defer stop()
		ctx := context.Background()

		require.Error(t, pronto.ReportProgress(ctx, 0.1, nil), "outside a job")

		job, err := c.Insert(ctx, progressArgs{}, nil)
		require.NoError(t, err)
		var seen *pronto.JobRow
		require.Eventually(t, func() bool {
			j, err := c.JobGet(ctx, job.ID)
			require.NoError(t, err)
			seen = j
			return j.Progress != nil && j.Progress.Value != nil && *j.Progress.Value == 0.5
		}, 15*time.Second, 10*time.Millisecond, "the progress never read 0.5")
		require.Equal(t, pronto.StateActive, seen.State)
		require.JSONEq(t, `{"rows":50}`, string(seen.Progress.Data))
		select {
		case e := <-events:
			require.Equal(t, job.ID, e.Job.ID)
			require.NotNil(t, e.Job.Progress)
		case <-time.After(15 * time.Second):
			t.Fatal("no progress event")
		}
		close(release)
		done := waitState(t, c, job.ID, pronto.StateCompleted)
		require.NotNil(t, done.Progress)
		require.Equal(t, 1.0, *done.Progress.Value, "a completed job's progress reads 1")

		failed, err := c.Insert(ctx, progressArgs{Fail: true}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		f := waitState(t, c, failed.ID, pronto.StateDiscarded)
		require.NotNil(t, f.Progress, "a failed job keeps its progress")
		require.Equal(t, 0.5, *f.Progress.Value)

		fresh, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Queue: "nobody"})
		require.NoError(t, err)
		j, err := c.JobGet(ctx, fresh.ID)
		require.NoError(t, err)
		require.Nil(t, j.Progress, "no progress before any report")
	})
}
