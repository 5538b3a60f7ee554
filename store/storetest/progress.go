package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func setProgress(t testing.TB, s store.Store, p store.ProgressParams) bool {
	t.Helper()
	ok, err := s.SetProgress(ctx(t), p)
	require.NoError(t, err)
	return ok
}

func getProgress(t testing.TB, s store.Store, id string) *store.Progress {
	t.Helper()
	p, err := s.GetProgress(ctx(t), id)
	require.NoError(t, err)
	return p
}

func fl(v float64) *float64 { return &v }

// testProgress: progress is recorded only for active jobs (and only from the run holding the job),
// never decreases within a run, keeps data until new data comes, is kept when the run ends, starts
// afresh with the next run, and goes with its job.
func testProgress(t *testing.T, s store.Store) {
	p := job("progress")
	_, err := s.Insert(ctx(t), []*store.InsertParams{p})
	require.NoError(t, err)
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Value: fl(0.5)}), "a job that is not active takes no progress")
	require.Nil(t, getProgress(t, s, p.ID))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: "00000000-0000-7000-8000-000000000001", Value: fl(0.5)}))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: "not-a-job", Value: fl(0.5)}))
	require.Nil(t, getProgress(t, s, "not-a-job"))

	first := reclaim(t, s, p.Queue, p.Kind, p.ID, "worker", time.Hour)
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: first.ClaimToken, Value: fl(0.3),
		Data: json.RawMessage(`{"rows":30}`)}))
	got := getProgress(t, s, p.ID)
	require.NotNil(t, got)
	require.InDelta(t, 0.3, *got.Value, 1e-9)
	require.JSONEq(t, `{"rows":30}`, string(got.Data))
	require.True(t, got.RunStartedAt.Equal(get(t, s, p.ID).StartedAt), "the progress names its run")
	require.False(t, got.UpdatedAt.IsZero())

	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Value: fl(0.2)}))
	require.InDelta(t, 0.3, *getProgress(t, s, p.ID).Value, 1e-9, "a lower value keeps the higher one")
	require.JSONEq(t, `{"rows":30}`, string(getProgress(t, s, p.ID).Data), "a report without data keeps the data")
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Data: json.RawMessage(`{"rows":40}`)}))
	got = getProgress(t, s, p.ID)
	require.InDelta(t, 0.3, *got.Value, 1e-9, "a report without a value keeps the value")
	require.JSONEq(t, `{"rows":40}`, string(got.Data))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: "00000000-0000-7000-8000-00000000dead", Value: fl(0.9)}),
		"a run that does not hold the job is ignored")
	require.InDelta(t, 0.3, *getProgress(t, s, p.ID).Value, 1e-9)

	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: first.Attempt, Token: first.ClaimToken,
		State: store.StateRetryable, ScheduledAt: time.Now().Add(-time.Second)}))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Value: fl(0.9)}), "a late report after the run ended is ignored")
	require.InDelta(t, 0.3, *getProgress(t, s, p.ID).Value, 1e-9, "a failed run's progress is kept")

	second := reclaim(t, s, p.Queue, p.Kind, p.ID, "worker", time.Hour)
	require.False(t, getProgress(t, s, p.ID).RunStartedAt.Equal(second.StartedAt), "the earlier run's progress is not the new run's")
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: second.ClaimToken, Value: fl(0.1)}))
	got = getProgress(t, s, p.ID)
	require.InDelta(t, 0.1, *got.Value, 1e-9, "a new run starts afresh, lower values included")
	require.Nil(t, got.Data, "a new run starts without the earlier run's data")
	require.True(t, got.RunStartedAt.Equal(second.StartedAt))

	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: second.Attempt, Token: second.ClaimToken, State: store.StateCompleted}))
	_, err = s.DeleteJob(ctx(t), p.ID)
	require.NoError(t, err)
	require.Nil(t, getProgress(t, s, p.ID), "progress goes with its job")
}
