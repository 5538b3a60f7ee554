package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

type snoozeThenFailArgs struct{}

func (snoozeThenFailArgs) Kind() string { return "test.snooze_then_fail" }

// TestSnoozesDoNotLengthenTheBackoff: on every store, a job that snoozed before it failed backs
// off by its retry policy's first delay, the delay of its first failure, not by the delay its
// attempt number (which counts the snoozes) would give; its next failure backs off by the second.
func TestSnoozesDoNotLengthenTheBackoff(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[snoozeThenFailArgs]) error {
			if len(j.Errors) == 0 && j.Attempt <= 3 {
				return pronto.Snooze(0) // three runs snooze
			}
			return errors.New("fails")
		}))
		c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
		policy := &pronto.RetryPolicy{InitialInterval: time.Hour, BackoffCoefficient: 2, MaxInterval: 100 * time.Hour, NoJitter: true}
		j, err := c.Insert(ctx, snoozeThenFailArgs{}, &pronto.InsertOpts{RetryPolicy: policy, MaxAttempts: 3})
		require.NoError(t, err)

		failed := waitState(t, c, j.ID, pronto.StateRetryable)
		require.Equal(t, 4, failed.Attempt, "three snoozes, then the failure")
		require.Len(t, failed.Errors, 1)
		wait := failed.ScheduledAt.Sub(failed.Errors[0].At)
		require.InDelta(t, time.Hour.Seconds(), wait.Seconds(), 60,
			"the first failure backs off by the first delay (the fourth would be 8 h): %s", wait)

		// Its second failure backs off by the second delay.
		_, err = c.JobRunNow(ctx, j.ID)
		require.NoError(t, err)
		var again *pronto.JobRow
		require.Eventually(t, func() bool {
			again, err = c.JobGet(ctx, j.ID)
			require.NoError(t, err)
			return again.State == pronto.StateRetryable && len(again.Errors) == 2
		}, 20*time.Second, 5*time.Millisecond)
		wait = again.ScheduledAt.Sub(again.Errors[1].At)
		require.InDelta(t, (2 * time.Hour).Seconds(), wait.Seconds(), 60, "the second failure: %s", wait)
	})
}
