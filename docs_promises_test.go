package pronto_test

// Promises of the README and docs/ that no other test held: each test names the passage it keeps true.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
)

// docsModeArgs is a job kind whose behaviour the test picks through Mode.
type docsModeArgs struct {
	Mode string `json:"mode"`
}

func (docsModeArgs) Kind() string { return "docs.mode" }

// docsModeClient starts a client on ts working docs.mode with f.
func docsModeClient(t *testing.T, ts *testStore, f func(ctx context.Context, job *pronto.Job[docsModeArgs]) error) *pronto.Client {
	t.Helper()
	w := pronto.NewWorkers()
	pronto.AddWorker(w, pronto.WorkFunc(f))
	return startClient(t, ts.Store, fastConfig(w, defaultQueue(4)))
}

// TestWorkReturnMeansWhatReadmeSays checks README's "What a worker's return means" table and the doc
// comments of Snooze, Cancel, Discard.
func TestWorkReturnMeansWhatReadmeSays(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var snoozed atomic.Int32
		c := docsModeClient(t, ts, func(ctx context.Context, job *pronto.Job[docsModeArgs]) error {
			switch job.Args.Mode {
			case "snooze":
				if snoozed.Add(1) == 1 {
					return pronto.Snooze(10 * time.Millisecond)
				}
				return nil
			case "cancel":
				return pronto.Cancel(errors.New("no longer wanted"))
			case "discard":
				return pronto.Discard(&net.OpError{Op: "dial", Err: errors.New("refused")})
			case "panic":
				panic("boom")
			case "timeout":
				<-ctx.Done()
				return ctx.Err()
			case "wrapped":
				return fmt.Errorf("calling: %w", &net.OpError{Op: "dial", Err: errors.New("refused")})
			}
			return nil
		})

		// Snooze: scheduled again, no attempt spent (MaxAttempts grows by one), no error entry.
		j, err := c.Insert(ctx, docsModeArgs{Mode: "snooze"}, &pronto.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		done := waitState(t, c, j.ID, pronto.StateCompleted)
		require.Empty(t, done.Errors, "Snooze: without an error entry")
		require.Equal(t, 4, done.MaxAttempts, "Snooze: max attempts grows by one")

		j, err = c.Insert(ctx, docsModeArgs{Mode: "cancel"}, nil)
		require.NoError(t, err)
		got := waitState(t, c, j.ID, pronto.StateCancelled)
		require.Len(t, got.Errors, 1, "Cancel records err in its error history")

		j, err = c.Insert(ctx, docsModeArgs{Mode: "discard"}, &pronto.InsertOpts{MaxAttempts: 5})
		require.NoError(t, err)
		got = waitState(t, c, j.ID, pronto.StateDiscarded)
		require.Len(t, got.Errors, 1)
		require.Equal(t, "net.OpError", got.Errors[0].Type)

		j, err = c.Insert(ctx, docsModeArgs{Mode: "panic"}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		got = waitState(t, c, j.ID, pronto.StateDiscarded)
		require.Len(t, got.Errors, 1)
		require.Equal(t, "panic", got.Errors[0].Type)
		require.Contains(t, got.Errors[0].Trace, "goroutine", "the stack in the job's error history")

		j, err = c.Insert(ctx, docsModeArgs{Mode: "timeout"}, &pronto.InsertOpts{MaxAttempts: 1, Timeout: 50 * time.Millisecond})
		require.NoError(t, err)
		got = waitState(t, c, j.ID, pronto.StateDiscarded)
		require.Len(t, got.Errors, 1)
		require.Equal(t, "timeout", got.Errors[0].Type)

		j, err = c.Insert(ctx, docsModeArgs{Mode: "wrapped"}, &pronto.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		got = waitState(t, c, j.ID, pronto.StateDiscarded)
		require.Equal(t, "net.OpError", got.Errors[0].Type)
	})
}

// TestMetricSeriesAreTheDocumentedOnes checks that the series docs/observability.md lists under "Every
// series" are the ones promexport exports, with the labels listed, once the client did each thing.
func TestMetricSeriesAreTheDocumentedOnes(t *testing.T) {
	ts := newTestStore(t, kindMemory)
	ctx := context.Background()
	m := promexport.New(nil)
	var snoozed, failed atomic.Int32
	w := pronto.NewWorkers()
	pronto.AddWorker(w, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[docsModeArgs]) error {
		switch job.Args.Mode {
		case "snooze":
			if snoozed.Add(1) == 1 {
				return pronto.Snooze(time.Millisecond)
			}
		case "fail":
			if failed.Add(1) == 1 {
				return errors.New("once")
			}
		case "discard":
			return pronto.Discard(errors.New("x"))
		case "cancel":
			return pronto.Cancel(errors.New("x"))
		case "progress":
			_ = pronto.ReportProgress(ctx, 0.5, nil)
		}
		return nil
	}))
	cfg := fastConfig(w, defaultQueue(4))
	m.Instrument(cfg)
	c, err := pronto.NewClient(ts.Store, cfg)
	require.NoError(t, err)
	defer m.Attach(c)()
	startBuilt(t, c)
	want := map[string]pronto.State{"ok": pronto.StateCompleted, "snooze": pronto.StateCompleted, "fail": pronto.StateCompleted,
		"discard": pronto.StateDiscarded, "cancel": pronto.StateCancelled, "progress": pronto.StateCompleted}
	for mode, st := range want {
		j, err := c.Insert(ctx, docsModeArgs{Mode: mode}, nil)
		require.NoError(t, err)
		waitState(t, c, j.ID, st)
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	labels := map[string][]string{
		"ojs_job_enqueued_total": {"queue", "type"}, "pronto_job_claimed_total": {"queue", "type"},
		"ojs_job_completed_total": {"queue", "type"}, "pronto_job_attempts_failed_total": {"queue", "type"},
		"ojs_job_retried_total": {"queue", "type"}, "ojs_job_failed_total": {"queue", "type"},
		"ojs_job_cancelled_total": {"queue", "type"}, "pronto_job_snoozed_total": {"queue", "type"},
		"ojs_job_duration_seconds": {"queue", "state", "type"}, "pronto_job_pickup_latency_seconds": {"queue", "type"},
		"ojs_job_queue_time_seconds": {"queue", "type"}, "pronto_job_turnaround_seconds": {"queue", "type"},
		"ojs_queue_depth": {"queue", "state"}, "ojs_workers_busy": {"queue"}, "pronto_workers_free": {"queue"},
		"pronto_jobs_prefetched": {"queue"}, "ojs_workers_active": nil, "pronto_leader": nil,
		"pronto_client_started": nil, "pronto_completer_backlog": nil, "ojs_progress_updates_total": {"queue", "type"},
		"ojs_dead_letter_added_total": {"queue", "type"}, "ojs_dead_letter_total": {"queue"},
		"pronto_events_dropped_total": nil, "pronto_metrics_store_errors_total": nil,
	}
	require.Eventually(t, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		got := map[string][]string{}
		for _, mf := range mfs {
			var ls []string
			if len(mf.GetMetric()) > 0 {
				for _, lp := range mf.GetMetric()[0].GetLabel() {
					ls = append(ls, lp.GetName())
				}
			}
			got[mf.GetName()] = ls
		}
		for name, ls := range labels {
			g, ok := got[name]
			if !ok {
				t.Logf("missing %s", name)
				return false
			}
			if fmt.Sprint(g) != fmt.Sprint(ls) {
				t.Logf("%s labels %v, want %v", name, g, ls)
				return false
			}
		}
		return true
	}, 5*time.Second, 50*time.Millisecond)
}
