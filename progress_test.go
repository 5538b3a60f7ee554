package pronto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
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
		cfg := heldConfig(workers, defaultQueue(2))
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

// progressCountingStore counts progress writes.
type progressCountingStore struct {
	*memory.Store
	writes atomic.Int64
}

func (s *progressCountingStore) SetProgress(ctx context.Context, p store.ProgressParams) (bool, error) {
	s.writes.Add(1)
	return s.Store.SetProgress(ctx, p)
}

// TestProgressThrottled: a worker reporting in a tight loop costs a write or two, and the last
// report is the one stored.
func TestProgressThrottled(t *testing.T) {
	st := &progressCountingStore{Store: memory.New()}
	var loop atomic.Int64 // how long the reporting loop took, in ns
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[progressArgs]) error {
		start := time.Now()
		defer func() { loop.Store(int64(time.Since(start))) }()
		for i := 1; i <= 10000; i++ {
			if err := pronto.ReportProgress(ctx, float64(i)/20000, map[string]int{"i": i}); err != nil {
				return err
			}
		}
		return errors.New("stop here, keeping the progress")
	}))
	c := startClient(t, st, fastConfig(workers, defaultQueue(1)))
	job, err := c.Insert(context.Background(), progressArgs{}, &pronto.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	j := waitState(t, c, job.ID, pronto.StateDiscarded)
	require.NotNil(t, j.Progress)
	require.Equal(t, 0.5, *j.Progress.Value, "the last report is stored")
	require.JSONEq(t, `{"i":10000}`, string(j.Progress.Data))
	// One write at once, at most one per second of reporting after it, and the flush at the end.
	bound := 2 + int64(time.Duration(loop.Load())/pronto.ProgressInterval)
	require.LessOrEqual(t, st.writes.Load(), bound, "10000 reports are throttled")
}

type checkpointArgs struct{}

func (checkpointArgs) Kind() string { return "test.checkpoint" }

// TestCheckpointResume: an attempt saves checkpoints (the latest wins, throttled or not), fails, and
// the next attempt reads the last one with LastCheckpoint and resumes from it; JobGet shows it as
// LastCheckpoint after the job ends; on every store.
func TestCheckpointResume(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		type cp struct {
			Offset int `json:"offset"`
		}
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[checkpointArgs]) error {
			var last cp
			found, err := pronto.LastCheckpoint(ctx, &last)
			if err != nil {
				return pronto.Discard(err)
			}
			if j.Attempt == 1 {
				if found {
					return pronto.Discard(errors.New("the first attempt found a checkpoint"))
				}
				if err := pronto.SaveCheckpoint(ctx, []int{1}); err == nil {
					return pronto.Discard(errors.New("a checkpoint that is not an object was accepted"))
				}
				for i := 1; i <= 7; i++ {
					if err := pronto.SaveCheckpoint(ctx, cp{Offset: i}); err != nil {
						return pronto.Discard(err)
					}
				}
				return errors.New("failed after offset 7")
			}
			if !found || last.Offset != 7 {
				return pronto.Discard(errors.New("the retry did not find checkpoint 7"))
			}
			return pronto.RecordResult(ctx, last)
		}))
		c := startClient(t, ts, fastConfig(workers, defaultQueue(1)))
		ctx := context.Background()
		require.Error(t, pronto.SaveCheckpoint(ctx, cp{}), "outside a job")
		_, err := pronto.LastCheckpoint(ctx, &cp{})
		require.Error(t, err, "outside a job")

		job, err := c.Insert(ctx, checkpointArgs{}, &pronto.InsertOpts{MaxAttempts: 2})
		require.NoError(t, err)
		done := waitState(t, c, job.ID, pronto.StateCompleted)
		require.Equal(t, 2, done.Attempt)
		require.JSONEq(t, `{"offset":7}`, string(done.Result))
		require.JSONEq(t, `{"offset":7}`, string(done.LastCheckpoint))
	})
}

type stallArgs struct{}

func (stallArgs) Kind() string { return "test.stall" }

// TestProgressStalled: with Config.ProgressStallTimeout, a running job that reported progress and
// then fell silent gets one EventProgressStalled with its last progress; a new report re-arms the
// watch; a job that ended is not reported; on every store.
func TestProgressStalled(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		step := make(chan struct{})
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[stallArgs]) error {
			if err := pronto.ReportProgress(ctx, 0.25, map[string]string{"phase": "one"}); err != nil {
				return pronto.Discard(err)
			}
			<-step // stalls here
			if err := pronto.ReportProgress(ctx, 0.5, nil); err != nil {
				return pronto.Discard(err)
			}
			<-step // and here
			return nil
		}))
		cfg := fastConfig(workers, defaultQueue(1))
		cfg.ProgressStallTimeout = 100 * time.Millisecond
		c := startClient(t, ts, cfg)
		events, stop := c.Subscribe(pronto.EventProgressStalled)
		defer stop()
		next := func() *pronto.Event {
			t.Helper()
			select {
			case e := <-events:
				return e
			case <-time.After(15 * time.Second):
				t.Fatal("no stall event")
			}
			return nil
		}
		job, err := c.Insert(context.Background(), stallArgs{}, nil)
		require.NoError(t, err)
		e := next()
		require.Equal(t, job.ID, e.Job.ID)
		require.Equal(t, pronto.StateActive, e.Job.State)
		require.InDelta(t, 0.25, *e.Job.Progress.Value, 1e-9)
		require.JSONEq(t, `{"phase":"one"}`, string(e.Job.Progress.Data))
		require.False(t, e.Job.Progress.UpdatedAt.IsZero())
		step <- struct{}{}
		e = next()
		require.InDelta(t, 0.5, *e.Job.Progress.Value, 1e-9, "a new report re-arms the watch")
		require.JSONEq(t, `{"phase":"one"}`, string(e.Job.Progress.Data))
		step <- struct{}{}
		waitState(t, c, job.ID, pronto.StateCompleted)
		select {
		case e := <-events:
			require.Fail(t, "a stall after the job ended", "%+v", e)
		case <-time.After(3 * cfg.ProgressStallTimeout):
		}
	})
}
