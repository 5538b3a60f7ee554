package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type progressDoneArgs struct{}

func (progressDoneArgs) Kind() string { return "test.progress_done" }

// TestJobRetryWithAndProgressCompleted, on every store: JobRetryWith refuses a job that is not
// discarded or cancelled and bad overrides, and retries a cancelled one as a new job with the
// changes, emitting EventRetried from the old state; a job whose attempt reported progress emits
// EventProgressCompleted after EventCompleted, with progress 1 and the last data.
func TestJobRetryWithAndProgressCompleted(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[progressDoneArgs]) error {
			return pronto.ReportProgress(ctx, 0.3, map[string]int{"step": 2})
		}))
		c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(1)))
		events, unsubscribe := c.Subscribe(pronto.EventRetried, pronto.EventCompleted, pronto.EventProgressCompleted)
		defer unsubscribe()

		row, err := c.Insert(ctx, progressDoneArgs{}, nil)
		require.NoError(t, err)
		next := func() *pronto.Event {
			select {
			case e := <-events:
				return e
			case <-time.After(20 * time.Second):
				t.Fatal("no event")
				return nil
			}
		}
		e := next()
		require.Equal(t, pronto.EventCompleted, e.Kind)
		e = next()
		require.Equal(t, pronto.EventProgressCompleted, e.Kind)
		require.Equal(t, row.ID, e.Job.ID)
		require.Equal(t, 1.0, *e.Job.Progress.Value)
		require.JSONEq(t, `{"step":2}`, string(e.Job.Progress.Data))
		require.Positive(t, e.Duration)

		// Not discarded or cancelled: refused.
		live, err := c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "test.other", Args: json.RawMessage(`[1]`),
			Opts: pronto.InsertOpts{Queue: "elsewhere"}}})
		require.NoError(t, err)
		_, err = c.JobRetryWith(ctx, live[0].ID, pronto.RetryOverride{Queue: "x"})
		require.ErrorIs(t, err, pronto.ErrInvalidTransition)
		_, err = c.JobCancel(ctx, live[0].ID)
		require.NoError(t, err)
		_, err = c.JobRetryWith(ctx, live[0].ID, pronto.RetryOverride{Meta: json.RawMessage(`[1]`)})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		_, err = c.JobRetryWith(ctx, live[0].ID, pronto.RetryOverride{Args: json.RawMessage(`{"a":1}`)})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)

		prio := 4
		j, err := c.JobRetryWith(ctx, live[0].ID, pronto.RetryOverride{Queue: "elsewhere-2", Priority: &prio, MaxAttempts: 2})
		require.NoError(t, err)
		require.NotEqual(t, live[0].ID, j.ID)
		require.Equal(t, pronto.StateAvailable, j.State)
		require.Equal(t, "elsewhere-2", j.Queue)
		require.Equal(t, 4, j.Priority)
		require.Equal(t, 2, j.MaxAttempts)
		require.JSONEq(t, `[1]`, string(j.Args))
		e = next()
		require.Equal(t, pronto.EventRetried, e.Kind)
		require.Equal(t, pronto.StateCancelled, e.From)
		require.Equal(t, j.ID, e.Job.ID)
		_, err = c.JobGet(ctx, live[0].ID)
		require.True(t, errors.Is(err, pronto.ErrNotFound), "the old job is deleted: %v", err)
	})
}
