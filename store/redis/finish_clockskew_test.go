package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestFinishClockSkew: a retry or snooze finished by a process whose clock is an hour off is due
// its delay after the Redis server's TIME, not an hour early or late. The completion's
// ScheduledAt is the process's clock plus the delay, as the client computes it.
func TestFinishClockSkew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	const delay = 10 * time.Minute
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		for _, state := range []store.State{store.StateRetryable, store.StateScheduled} {
			t.Run(skew.String()+"/"+string(state), func(t *testing.T) {
				setProcessSkew(t, s, skew)
				q := "skew" + strconv.Itoa(int(skew/time.Hour)) + string(state)
				p := testJob(q)
				_, err := s.Insert(ctx, []*store.InsertParams{p})
				require.NoError(t, err)
				got, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
				require.NoError(t, err)
				require.Len(t, got, 1)
				c := store.Completion{ID: got[0].ID, Attempt: got[0].Attempt, Token: got[0].ClaimToken,
					State: state, ScheduledAt: s.processNow().Add(delay), RefundAttempt: state == store.StateScheduled}
				res, err := s.Finish(ctx, []store.Completion{c})
				require.NoError(t, err)
				require.True(t, res[0].Applied)
				now, err := s.rdb.Time(ctx).Result()
				require.NoError(t, err)
				j, err := s.GetJob(ctx, c.ID)
				require.NoError(t, err)
				require.Equal(t, state, j.State)
				require.WithinDuration(t, now.Add(delay), j.ScheduledAt, time.Minute,
					"due by the finishing process's clock, %s off the server's", skew)
			})
		}
	}
}
