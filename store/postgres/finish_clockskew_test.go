package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestFinishStatementRelative: the statement sqlFinish still has the due time finishStatement
// rewrites, so that retries and snoozes are judged by the database's clock.
func TestFinishStatementRelative(t *testing.T) {
	require.True(t, finishRelative, "sqlFinish no longer holds %q: finishStatement cannot make it relative", finishDueAbsolute)
}

// TestFinishClockSkew: a retry or snooze finished by a process whose clock is an hour off is due
// its delay after the database's now, not an hour early or late. The completion's ScheduledAt is
// the process's clock plus the delay, as the client computes it.
func TestFinishClockSkew(t *testing.T) {
	ctx := context.Background()
	s := setup(t)
	const delay = 10 * time.Minute
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		for _, state := range []store.State{store.StateRetryable, store.StateScheduled} {
			for _, inTx := range []bool{false, true} {
				t.Run(skew.String()+"/"+string(state)+map[bool]string{false: "", true: "/tx"}[inTx], func(t *testing.T) {
					setProcessSkew(t, s, skew)
					p := params("skew")
					_, err := s.Insert(ctx, []*store.InsertParams{p})
					require.NoError(t, err)
					got, err := s.Claim(ctx, store.ClaimParams{Queue: "skew", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
					require.NoError(t, err)
					require.Len(t, got, 1)
					c := store.Completion{ID: got[0].ID, Attempt: got[0].Attempt, Token: got[0].ClaimToken,
						State: state, ScheduledAt: s.processNow().Add(delay), RefundAttempt: state == store.StateScheduled}
					if inTx {
						tx, err := s.pool.Begin(ctx)
						require.NoError(t, err)
						applied, err := s.CompletePgxTx(ctx, tx, c)
						require.NoError(t, err)
						require.True(t, applied)
						require.NoError(t, tx.Commit(ctx))
					} else {
						res, err := s.Finish(ctx, []store.Completion{c})
						require.NoError(t, err)
						require.True(t, res[0].Applied)
					}
					var now time.Time
					require.NoError(t, s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
					j, err := s.GetJob(ctx, c.ID)
					require.NoError(t, err)
					require.Equal(t, state, j.State)
					require.WithinDuration(t, now.Add(delay), j.ScheduledAt, time.Minute,
						"due by the finishing process's clock, %s off the database's", skew)
				})
			}
		}
	}
}
