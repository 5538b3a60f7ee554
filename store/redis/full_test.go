package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// privateStore starts a private redis-server (killed when the test ends) with args and returns a
// store on it and a client of its own.
func privateStore(t *testing.T, args ...string) (*Store, *goredis.Client) {
	t.Helper()
	srv := redistest.StartServer(t, append([]string{"--appendonly", "no"}, args...)...)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, PoolSize: 4})
	s, err := New(context.Background(), rdb, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	return s, rdb
}

// usedMemory returns the server's used_memory.
func usedMemory(t *testing.T, rdb *goredis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return used
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// fill makes the server full, as docs/redis.md's "A full Redis" describes: maxmemory just below
// what it uses now, under noeviction.
func fill(t *testing.T, rdb *goredis.Client) {
	t.Helper()
	ctx := context.Background()
	used := usedMemory(t, rdb)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*97/100, 10)).Err())
	require.ErrorContains(t, rdb.Set(ctx, "probe", strings.Repeat("x", 1000), 0).Err(), "OOM", "Redis is full")
}

// discardedJobs inserts n jobs in queue and finishes them discarded.
func discardedJobs(t *testing.T, s *Store, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	var params []*store.InsertParams
	for range n {
		params = append(params, testJob(queue))
	}
	_, err := s.Insert(ctx, params)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: queue, Limit: n, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	var cs []store.Completion
	for _, j := range jobs {
		cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateDiscarded,
			Error: &store.AttemptError{Attempt: 1, Message: "boom"}})
	}
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}
}

// TestFullRedisPrunesDiscarded: dead-letter pruning frees memory, so it runs on a full Redis
// (docs/redis.md, "A full Redis"): its selection reads through functions flagged no-writes, which
// Redis runs when full, and its deletes carry allow-oom.
func TestFullRedisPrunesDiscarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	discardedJobs(t, s, "dl", 50)
	fill(t, rdb)
	n, err := s.PruneDiscarded(ctx, store.PruneParams{Before: time.Now().Add(time.Hour), Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 50, n["dl"])
}

// TestFullRedisReadsPruneCandidates: the dead-letter archive reads what it is about to delete on a
// full Redis too: reading writes nothing.
func TestFullRedisReadsPruneCandidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	discardedJobs(t, s, "dl", 20)
	fill(t, rdb)
	jobs, err := s.PruneCandidates(ctx, store.PruneParams{Before: time.Now().Add(time.Hour), Limit: 1000})
	require.NoError(t, err)
	require.Len(t, jobs, 20)
}

// TestFullRedisReadsRateLimit: a full Redis refuses writes, not reads; a stored rate limit is read
// by a function, which runs all the same.
func TestFullRedisReadsRateLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	require.NoError(t, s.SetRateLimit(ctx, "api", store.RateLimit{MaxActive: 3}))
	fill(t, rdb)
	info, err := s.GetRateLimit(ctx, "api")
	require.NoError(t, err)
	require.Equal(t, 3, info.Limit.MaxActive)
}

// TestFullRedisFinishRetryKeepsWrittenOutcomes: Finish writes each queue's outcomes in a call of
// its own. When Redis fills up between two of them, the first queue's outcome is written and the
// second's refused (OOM); the retry of the whole batch, as the completer makes it, reports both
// applied: the one written by the failed try stands as this run's, it is not taken for a run that
// lost its claim.
func TestFullRedisFinishRetryKeepsWrittenOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	a, b := testJob("qa"), testJob("qb")
	_, err := s.Insert(ctx, []*store.InsertParams{a, b})
	require.NoError(t, err)
	ja := claimOne(t, s, "qa")
	jb := claimOne(t, s, "qb")
	// Room for the first outcome (a 1 MB result) but not, after it, for the second's (3 MB).
	used := usedMemory(t, rdb)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+5<<20, 10)).Err())
	cs := []store.Completion{
		{ID: ja.ID, Attempt: ja.Attempt, Token: ja.ClaimToken, State: store.StateCompleted,
			Result: []byte(`"` + strings.Repeat("a", 1<<20) + `"`)},
		{ID: jb.ID, Attempt: jb.Attempt, Token: jb.ClaimToken, State: store.StateCompleted,
			Result: []byte(`"` + strings.Repeat("b", 3<<20) + `"`)},
	}
	_, err = s.Finish(ctx, cs)
	require.ErrorContains(t, err, "OOM", "the second outcome does not fit")
	require.True(t, s.Unavailable(err))
	got, err := s.GetJob(ctx, ja.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, got.State, "the first queue's outcome is written")

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err()) // memory freed
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	require.True(t, res[0].Applied, "the outcome the failed try wrote is this run's")
	require.True(t, res[1].Applied)
	for _, j := range []*store.Job{ja, jb} {
		got, err := s.GetJob(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, got.State)
		require.Empty(t, got.ClaimToken)
	}
}

// TestFinishRetryOfWrittenOutcome: a completion sent again after its outcome was written (a reply
// lost, a batch retried) reports applied and writes nothing again; a completion of the same run
// with another outcome, or of another run, is still refused.
func TestFinishRetryOfWrittenOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := privateStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("retry")})
	require.NoError(t, err)
	j := claimOne(t, s, "retry")
	fail := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(time.Hour), Error: &store.AttemptError{Attempt: j.Attempt, Message: "boom"}}
	for range 2 {
		res, err := s.Finish(ctx, []store.Completion{fail})
		require.NoError(t, err)
		require.True(t, res[0].Applied)
	}
	got, err := s.GetJob(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRetryable, got.State)
	require.Len(t, got.Errors, 1, "the retry wrote its error entry once")

	for name, c := range map[string]store.Completion{
		"same run, another outcome": {ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted},
		"another run's token":       {ID: j.ID, Attempt: j.Attempt, Token: "other", State: store.StateRetryable},
		"another attempt":           {ID: j.ID, Attempt: j.Attempt + 1, Token: j.ClaimToken, State: store.StateRetryable},
		"no token":                  {ID: j.ID, Attempt: j.Attempt, State: store.StateRetryable},
	} {
		res, err := s.Finish(ctx, []store.Completion{c})
		require.NoError(t, err)
		require.False(t, res[0].Applied, name)
	}
	got, err = s.GetJob(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRetryable, got.State)
	require.Len(t, got.Errors, 1)
}
