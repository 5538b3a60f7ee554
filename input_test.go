package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertUnstorableRefused: on every store, the Go API refuses input some store cannot hold with
// an error matching ErrInvalidArgs that names the field, never a raw database error; nothing is stored.
func TestInsertUnstorableRefused(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startClient(t, ts.Store, &pronto.Config{})
		check := func(what string, err error, field string) {
			t.Helper()
			require.Error(t, err, what)
			require.True(t, errors.Is(err, pronto.ErrInvalidArgs), "%s: %v", what, err)
			require.Contains(t, err.Error(), field+": ", what)
		}
		_, err := c.Insert(ctx, echoArgs{Message: "a\x00b"}, nil)
		check("Insert NUL", err, "args[0].message")
		_, err = c.Insert(ctx, echoArgs{Message: "ok"}, &pronto.InsertOpts{Tags: []string{"t", "\xff"}})
		check("Insert tag", err, "tags[1]")
		_, err = c.Insert(ctx, echoArgs{Message: "ok"}, &pronto.InsertOpts{Meta: map[string]any{"k": "\x00"}})
		check("Insert meta", err, "meta.k")
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{{Args: echoArgs{Message: "ok"}}, {Args: echoArgs{Message: "\x00"}}})
		check("InsertMany", err, "args[0].message")
		for _, raw := range []string{`["\u0000"]`, `["\ud800"]`, "[\"\xff\"]", `[1e1000000]`} {
			_, err = c.InsertRaw(ctx, []pronto.RawJob{{Kind: "a.b", Args: json.RawMessage(raw)}})
			check("InsertRaw "+raw, err, "args[0]")
			_, err = c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "a.b", Args: json.RawMessage(`[]`), Meta: json.RawMessage(`{"m":` + strings.TrimSuffix(strings.TrimPrefix(raw, "["), "]") + `}`)}})
			check("InsertOJS meta "+raw, err, "meta.m")
		}
		_, err = c.WorkflowInsert(ctx, pronto.NewChain("c", pronto.WorkflowJob{Args: echoArgs{Message: "\x00"}}))
		check("workflow step", err, "args[0].message")
		_, err = c.WorkflowInsert(ctx, pronto.NewChain("c\x00", pronto.WorkflowJob{Args: echoArgs{Message: "ok"}}))
		check("workflow name", err, "workflow name")
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "n", Expression: "@hourly", Kind: "a.b", Args: json.RawMessage(`["\u0000"]`)})
		check("cron args", err, "args[0]")
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "n", Expression: "@hourly", Kind: "a.b", Description: "d\x00"})
		check("cron description", err, "description")
		// Every store counts attempts in 32 bits.
		_, err = c.Insert(ctx, echoArgs{Message: "ok"}, &pronto.InsertOpts{MaxAttempts: 1 << 31})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.Contains(t, err.Error(), "max attempts")
		_, err = c.CronRegister(ctx, pronto.CronJob{Name: "n", Expression: "0 0 30 2 *", Kind: "a.b"})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, "a schedule with no occurrence")

		jobs, err := c.JobList(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, jobs.Jobs, "nothing is stored")
	})
}

// TestRecordResultUnstorable: RecordResult refuses a result some store cannot hold at once, with an
// error the worker can act on, instead of the outcome write failing later; the attempt completes.
func TestRecordResultUnstorable(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		var mu sync.Mutex
		var recErr error
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			err := pronto.RecordResult(ctx, map[string]string{"v": "a\x00b"})
			mu.Lock()
			recErr = err
			mu.Unlock()
			return pronto.RecordResult(ctx, map[string]string{"v": j.Args.Message})
		}))
		c := startClient(t, ts, fastConfig(workers, defaultQueue(1)))
		row, err := c.Insert(context.Background(), echoArgs{Message: "ok"}, nil)
		require.NoError(t, err)
		j := waitState(t, c, row.ID, pronto.StateCompleted)
		mu.Lock()
		defer mu.Unlock()
		require.ErrorIs(t, recErr, pronto.ErrInvalidArgs)
		require.Contains(t, recErr.Error(), "result.v: ")
		require.JSONEq(t, `{"v":"ok"}`, string(j.Result))
	})
}
