package redis

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// The tests below delete a job's hash behind the store's back, standing in for an allkeys-*
// maxmemory policy evicting it: the queue's other jobs keep running, and no result names a job it
// cannot describe.

// TestEvictedScheduledJobLeavesQueueClaimable: a due scheduled job whose hash is gone is dropped by
// the claim's promotion and by Promote, which then go on with the queue's other jobs.
func TestEvictedScheduledJobLeavesQueueClaimable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, promote := range []bool{false, true} {
		s, rdb := privateStore(t)
		ready := testJob("ev")
		gone := testJob("ev")
		gone.State = store.StateScheduled
		gone.ScheduledAt = time.Now().Add(-time.Minute) // due
		_, err := s.Insert(ctx, []*store.InsertParams{ready, gone})
		require.NoError(t, err)
		j, err := s.GetJob(ctx, gone.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateScheduled, j.State)
		require.NoError(t, rdb.Del(ctx, s.jobKey("ev", gone.ID)).Err())

		if promote {
			n, err := s.Promote(ctx, 100)
			require.NoError(t, err)
			require.Zero(t, n, "nothing left to promote")
		}
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "ev", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, ready.ID, jobs[0].ID)
		sched, err := rdb.ZCard(ctx, s.qkey("ev")+"sched").Result()
		require.NoError(t, err)
		require.Zero(t, sched, "the evicted job left the due index")
		n, err := rdb.Exists(ctx, s.jobKey("ev", gone.ID)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "no hash is written for the evicted job")
	}
}

// TestEvictedActiveJobRescue: an active job whose hash is gone is dropped from the lease index by
// the rescue, which reports no job for it and writes no hash.
func TestEvictedActiveJobRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	p := testJob("ev")
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "ev", Limit: 1, WorkerID: "w", LeaseDuration: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, rdb.Del(ctx, s.jobKey("ev", p.ID)).Err())

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := s.Rescue(ctx, store.RescueParams{Limit: 100})
		require.NoError(c, err)
		for _, j := range append(res.Requeued, res.Discarded...) {
			require.NotNil(c, j, "a rescue result holds a nil job")
		}
		err = rdb.ZScore(ctx, s.qkey("ev")+"lease", p.ID).Err()
		require.ErrorIs(c, err, goredis.Nil, "the lease ran out and the rescue dropped the job from the lease index")
	}, 10*time.Second, 5*time.Millisecond)
	n, err := rdb.Exists(ctx, s.jobKey("ev", p.ID)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no hash is written for the evicted job")
}

// TestEvictedExpiringJob: a not-started job with an expiry whose hash is gone is dropped from the
// expiry index by DiscardExpired, which reports no job for it and writes no hash.
func TestEvictedExpiringJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	p := testJob("ev")
	p.State = store.StateScheduled
	p.ScheduledAt = time.Now().Add(time.Hour)
	p.ExpiresAt = time.Now().Add(10 * time.Millisecond)
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, s.jobKey("ev", p.ID)).Err())

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		jobs, err := s.DiscardExpired(ctx, 100)
		require.NoError(c, err)
		for _, j := range jobs {
			require.NotNil(c, j, "a discarded job is nil")
		}
		err = rdb.ZScore(ctx, s.qkey("ev")+"exp", p.ID).Err()
		require.ErrorIs(c, err, goredis.Nil, "the expiry passed and the job left the expiry index")
	}, 10*time.Second, 5*time.Millisecond)
	n, err := rdb.Exists(ctx, s.jobKey("ev", p.ID)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no hash is written for the evicted job")
}

// TestEvictionPolicyWarned: a server whose maxmemory-policy evicts keys is reported by
// CheckEvictionPolicy and warned about through the store's logger when the store starts; the
// default, noeviction, is not.
func TestEvictionPolicyWarned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		policy string
		warned bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"volatile-ttl", true},
	} {
		srv := redistest.StartServer(t, "--appendonly", "no", "--maxmemory-policy", tc.policy)
		rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		var logs bytes.Buffer
		s, err := New(ctx, rdb, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		err = s.CheckEvictionPolicy(ctx)
		if !tc.warned {
			require.NoError(t, err)
			require.NotContains(t, logs.String(), "maxmemory-policy")
			continue
		}
		require.ErrorIs(t, err, ErrEvictionPolicy)
		require.ErrorContains(t, err, tc.policy)
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), tc.policy)
	}
}
