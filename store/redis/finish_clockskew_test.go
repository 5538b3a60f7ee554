package redis

import (
	"context"
	"strconv"
	"sync"
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

// TestFinishClockSkewAnnounced: the notification of a retry finished by a process an hour fast
// carries the due time on the server's clock, as the job is due, so that receivers wake for it
// then and not an hour late (they found it at their next poll).
func TestFinishClockSkewAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	const delay = 10 * time.Minute
	setProcessSkew(t, s, time.Hour)
	q := "skew-announced"
	var mu sync.Mutex
	var dues []time.Time
	unsubscribe := s.Notifier().Subscribe(func(n store.Notification) {
		if n.Kind == store.NotifyInsert && n.Queue == q && !n.DueAt.IsZero() {
			mu.Lock()
			dues = append(dues, n.DueAt)
			mu.Unlock()
		}
	})
	defer unsubscribe()
	_, err := s.Insert(ctx, []*store.InsertParams{testJob(q)})
	require.NoError(t, err)
	got, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err := s.Finish(ctx, []store.Completion{{ID: got[0].ID, Attempt: got[0].Attempt, Token: got[0].ClaimToken,
		State: store.StateRetryable, ScheduledAt: s.processNow().Add(delay)}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dues) > 0
	}, 30*time.Second, 5*time.Millisecond, "the retry was not announced")
	mu.Lock()
	defer mu.Unlock()
	require.WithinDuration(t, now.Add(delay), dues[0], time.Minute, "announced on the finishing process's clock, an hour fast")
}
