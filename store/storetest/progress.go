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

// testProgressCheckpoint: a checkpoint is saved only by the run holding an active job, replaced only
// by a report that carries one, and kept across runs (the next attempt resumes from it) and after
// the job ends, until the job is deleted.
func testProgressCheckpoint(t *testing.T, s store.Store) {
	p := job("checkpoint")
	_, err := s.Insert(ctx(t), []*store.InsertParams{p})
	require.NoError(t, err)
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Checkpoint: json.RawMessage(`{"at":1}`)}),
		"a job that is not active takes no checkpoint")
	require.Nil(t, getProgress(t, s, p.ID))

	first := reclaim(t, s, p.Queue, p.Kind, p.ID, "worker", time.Hour)
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: first.ClaimToken, Checkpoint: json.RawMessage(`{"at":10}`)}),
		"a report may carry a checkpoint only")
	got := getProgress(t, s, p.ID)
	require.JSONEq(t, `{"at":10}`, string(got.Checkpoint))
	require.Nil(t, got.Value)
	require.Nil(t, got.Data)
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: first.ClaimToken, Value: fl(0.4)}))
	got = getProgress(t, s, p.ID)
	require.JSONEq(t, `{"at":10}`, string(got.Checkpoint), "a report without a checkpoint keeps it")
	require.InDelta(t, 0.4, *got.Value, 1e-9)
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: first.ClaimToken, Value: fl(0.5),
		Checkpoint: json.RawMessage(`{"at":20}`)}))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: "00000000-0000-7000-8000-00000000dead",
		Checkpoint: json.RawMessage(`{"at":99}`)}), "a run that does not hold the job saves no checkpoint")
	require.JSONEq(t, `{"at":20}`, string(getProgress(t, s, p.ID).Checkpoint))

	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: first.Attempt, Token: first.ClaimToken,
		State: store.StateRetryable, ScheduledAt: time.Now().Add(-time.Second)}))
	require.False(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Checkpoint: json.RawMessage(`{"at":30}`)}),
		"a late checkpoint after the run ended is ignored")
	require.JSONEq(t, `{"at":20}`, string(getProgress(t, s, p.ID).Checkpoint), "a failed run's checkpoint is kept")

	second := reclaim(t, s, p.Queue, p.Kind, p.ID, "worker", time.Hour)
	require.JSONEq(t, `{"at":20}`, string(getProgress(t, s, p.ID).Checkpoint), "the next run finds the last checkpoint")
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: second.ClaimToken, Value: fl(0.1)}))
	got = getProgress(t, s, p.ID)
	require.InDelta(t, 0.1, *got.Value, 1e-9)
	require.JSONEq(t, `{"at":20}`, string(got.Checkpoint), "a new run's first report keeps the earlier run's checkpoint")
	require.True(t, setProgress(t, s, store.ProgressParams{ID: p.ID, Token: second.ClaimToken, Checkpoint: json.RawMessage(`{"at":25}`)}))
	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: second.Attempt, Token: second.ClaimToken, State: store.StateCompleted}))
	require.JSONEq(t, `{"at":25}`, string(getProgress(t, s, p.ID).Checkpoint), "kept after the job ends")
	_, err = s.DeleteJob(ctx(t), p.ID)
	require.NoError(t, err)
	require.Nil(t, getProgress(t, s, p.ID), "the checkpoint goes with its job")
}

// testProgressBatch: GetProgressBatch returns, in one call, what GetProgress returns for each job
// with progress, and leaves out jobs without progress and ids of no job.
func testProgressBatch(t *testing.T, s store.Store) {
	a := active(t, s, job("progress-batch"))
	b := active(t, s, job("progress-batch"))
	c := active(t, s, job("progress-batch"))
	require.True(t, setProgress(t, s, store.ProgressParams{ID: a.ID, Value: fl(0.5)}))
	require.True(t, setProgress(t, s, store.ProgressParams{ID: b.ID, Data: json.RawMessage(`{"rows":3}`)}))
	got, err := s.GetProgressBatch(ctx(t), []string{a.ID, b.ID, c.ID, "not-a-job-id", uniq("missing")})
	require.NoError(t, err)
	require.Len(t, got, 2, "only the jobs with progress")
	for _, id := range []string{a.ID, b.ID} {
		require.Equal(t, getProgress(t, s, id), got[id], "job %s: as GetProgress gives it", id)
	}
	empty, err := s.GetProgressBatch(ctx(t), nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}
