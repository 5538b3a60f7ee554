package redis

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/completer"
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

// partlyFullRedis claims a job in each of two queues and sets maxmemory so that the first one's
// outcome (a few bytes) fits and the second's (an 8 MB result) does not, as Finish writes each
// queue's outcomes in a call of its own. Redis refuses a function when its memory is over the limit
// as the call starts, and the second call's 8 MB arrive in its query buffer (counted) only after the
// first call ran, over many reads: 4 MB of room separate the two by a wide margin either way.
// It returns the two completions.
func partlyFullRedis(t *testing.T, s *Store, rdb *goredis.Client) []store.Completion {
	t.Helper()
	ctx := context.Background()
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("qa"), testJob("qb")})
	require.NoError(t, err)
	ja := claimOne(t, s, "qa")
	jb := claimOne(t, s, "qb")
	used := usedMemory(t, rdb)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+4<<20, 10)).Err())
	return []store.Completion{
		{ID: ja.ID, Attempt: ja.Attempt, Token: ja.ClaimToken, State: store.StateCompleted,
			Result: []byte(`"a"`)},
		{ID: jb.ID, Attempt: jb.Attempt, Token: jb.ClaimToken, State: store.StateCompleted,
			Result: []byte(`"` + strings.Repeat("b", 8<<20) + `"`)},
	}
}

// TestFullRedisFinishReportsWrittenOutcomes: when Redis fills up between two queues' calls of one
// Finish, the first queue's outcome is written and the second's refused (OOM). Finish says which
// (store.FinishPartialError): the written one is applied and must not be sent again (it would be
// reported not applied: a completion applies once), the other is unknown, and sent again once
// memory is freed it is applied.
func TestFullRedisFinishReportsWrittenOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	cs := partlyFullRedis(t, s, rdb)
	_, err := s.Finish(ctx, cs)
	require.ErrorContains(t, err, "OOM", "the second outcome does not fit")
	require.True(t, store.IsUnavailable(s, err))
	var partial *store.FinishPartialError
	require.ErrorAs(t, err, &partial)
	require.Equal(t, []bool{true, false}, partial.Known)
	require.Equal(t, store.FinishResult{ID: cs[0].ID, Applied: true}, partial.Results[0])
	got, err := s.GetJob(ctx, cs[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, got.State, "the first queue's outcome is written")

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err()) // memory freed
	res, err := s.Finish(ctx, cs[1:])
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	res, err = s.Finish(ctx, cs[:1])
	require.NoError(t, err)
	require.False(t, res[0].Applied, "a completion applies once")
	for _, c := range cs {
		got, err := s.GetJob(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, got.State)
		require.True(t, bytes.Equal(c.Result, got.Result), "the result is stored")
	}
}

// TestFullRedisCompleterKeepsWrittenOutcomes: the completer, writing a batch that a full Redis
// takes only in part, reports every outcome applied once memory is freed: it settles the written
// outcome from the Finish that failed and retries only the other, so a completed run is never
// taken for one that lost its claim (its job would run again).
func TestFullRedisCompleterKeepsWrittenOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := privateStore(t)
	cs := partlyFullRedis(t, s, rdb)
	var tries atomic.Int32
	var firstErr error // the first Finish's, checked on the test's goroutine (require there only)
	c := completer.New(completer.Config{
		Finish: func(ctx context.Context, cs []store.Completion) ([]store.FinishResult, error) {
			res, err := s.Finish(ctx, cs)
			if tries.Add(1) == 1 {
				firstErr = err
				if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil { // memory freed
					t.Errorf("free memory: %v", err)
				}
			}
			return res, err
		},
		Transient: func(err error) bool { return !store.IsRefused(s, err) },
	})
	applied := make(chan bool, len(cs))
	for _, comp := range cs {
		c.Add(completer.Item{Completion: comp, Done: func(ok bool, err error) { applied <- ok && err == nil }})
	}
	// Both outcomes are queued before the completer runs, so its first batch holds both: started
	// first, it could write the first alone, before Redis is asked to hold the second.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Run(runCtx)
	c.Close()
	<-c.Done()
	require.ErrorContains(t, firstErr, "OOM", "the first Finish meets a full Redis")
	for range cs {
		require.True(t, <-applied, "every outcome is reported applied")
	}
	require.EqualValues(t, 2, tries.Load(), "the retry sends only the outcome not written")
}

// TestFinishAppliesACompletionOnce: a completion sent again after its outcome was written (a
// worker's request sent twice, a reply lost) is not applied and writes nothing again, as on every
// store; nor is a completion of the same run with another outcome, or of another run.
func TestFinishAppliesACompletionOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := privateStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("retry")})
	require.NoError(t, err)
	j := claimOne(t, s, "retry")
	fail := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(time.Hour), Error: &store.AttemptError{Attempt: j.Attempt, Message: "boom"}}
	res, err := s.Finish(ctx, []store.Completion{fail})
	require.NoError(t, err)
	require.True(t, res[0].Applied)

	for name, c := range map[string]store.Completion{
		"the same completion":       fail,
		"same run, another outcome": {ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted},
		"another run's token":       {ID: j.ID, Attempt: j.Attempt, Token: "other", State: store.StateRetryable},
		"another attempt":           {ID: j.ID, Attempt: j.Attempt + 1, Token: j.ClaimToken, State: store.StateRetryable},
		"no token":                  {ID: j.ID, Attempt: j.Attempt, State: store.StateRetryable},
	} {
		res, err := s.Finish(ctx, []store.Completion{c})
		require.NoError(t, err)
		require.False(t, res[0].Applied, name)
	}
	got, err := s.GetJob(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateRetryable, got.State)
	require.Len(t, got.Errors, 1, "the error entry is written once")
}
