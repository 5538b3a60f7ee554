package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

func testJob(queue string) *store.InsertParams {
	return &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: queue, Args: []byte(`[1]`),
		State: store.StateAvailable, MaxAttempts: 3}
}

// TestUniqueIsPerQueue: on Redis a unique key is held within its queue (see store/features.go).
func TestUniqueIsPerQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	a, b := testJob("uq-a"), testJob("uq-b")
	a.UniqueKey, b.UniqueKey = "same", "same"
	_, err := s.Insert(ctx, []*store.InsertParams{a, b})
	require.NoError(t, err, "the same key in two queues does not conflict")
	c := testJob("uq-a")
	c.UniqueKey = "same"
	_, err = s.Insert(ctx, []*store.InsertParams{c})
	var ue *store.UniqueConflictError
	require.ErrorAs(t, err, &ue, "within one queue it does")
	require.Equal(t, a.ID, ue.ExistingID)
}

// TestRefusedMultiQueueBatchIsUndone: a batch spanning queues that one queue refuses leaves
// nothing behind in the others, and its ids stay free.
func TestRefusedMultiQueueBatchIsUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	held := testJob("mq-b")
	held.UniqueKey = "k"
	_, err := s.Insert(ctx, []*store.InsertParams{held})
	require.NoError(t, err)

	first, dup := testJob("mq-a"), testJob("mq-b")
	dup.UniqueKey = "k"
	_, err = s.Insert(ctx, []*store.InsertParams{first, dup})
	require.ErrorIs(t, err, store.ErrUniqueConflict)
	_, err = s.GetJob(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the other queue's job was undone")
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		if q.Name == "mq-a" {
			require.Zero(t, q.Counts[store.StateAvailable])
		}
	}
	_, err = s.Insert(ctx, []*store.InsertParams{first})
	require.NoError(t, err, "the undone job's id is free again")
}

// TestQueueKeysShareATag: every key the store writes for a queue carries that queue's hash tag, so
// a queue's keys live in one cluster slot; the global keys carry none (or {cron}).
func TestQueueKeysShareATag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	odd := "we{ird}"
	for _, q := range []string{"tags", odd} {
		p1, p2 := testJob(q), testJob(q)
		p2.UniqueKey = "u"
		p2.ExpiresAt = time.Now().Add(time.Hour)
		_, err := s.Insert(ctx, []*store.InsertParams{p1, p2})
		require.NoError(t, err)
		jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
		require.NoError(t, err)
		_, err = s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateCompleted}})
		require.NoError(t, err)
		require.NoError(t, s.PauseQueue(ctx, q))
	}
	keys, err := s.rdb.Keys(ctx, s.prefix+"*").Result() // test only: KEYS is never on a request path
	require.NoError(t, err)
	seen := map[string]int{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, s.prefix)
		switch {
		case strings.HasPrefix(rest, "{q:tags}:"):
			seen["tags"]++
		case strings.HasPrefix(rest, "{"+queueTag(odd)+"}:"):
			seen[odd]++
		default:
			require.NotContains(t, rest, "{", "key %s has a tag of no queue", k)
		}
	}
	require.Greater(t, seen["tags"], 5)
	require.Equal(t, seen["tags"], seen[odd], "an odd queue name gets the same keys under its hex tag")
}

// TestDurableAcrossCrash: with appendonly yes and appendfsync always, a Redis killed mid-run
// (SIGKILL) loses nothing the store acknowledged: every job, state, attempt and lease is back after
// the restart, and claiming goes on where it stopped.
func TestDurableAcrossCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	open := func() *Store {
		rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		s, err := New(ctx, rdb, Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
		return s
	}
	s := open()
	const n = 300
	var params []*store.InsertParams
	for range n {
		params = append(params, testJob("durable"))
	}
	for i := 0; i < n; i += 50 {
		_, err := s.Insert(ctx, params[i:i+50])
		require.NoError(t, err)
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Queue: "durable", Limit: 100, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	var cs []store.Completion
	for _, j := range claimed[:60] {
		cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted})
	}
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}

	srv.Kill()
	srv.Start()
	s2 := open()
	qs, err := s2.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, int64(200), qs[0].Counts[store.StateAvailable])
	require.Equal(t, int64(40), qs[0].Counts[store.StateActive])
	require.Equal(t, int64(60), qs[0].Counts[store.StateCompleted])
	for _, j := range claimed[60:] {
		got, err := s2.GetJob(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, store.StateActive, got.State)
		require.Equal(t, j.ClaimToken, got.ClaimToken, "the claim survives with its token")
	}
	rest, err := s2.Claim(ctx, store.ClaimParams{Queue: "durable", Limit: 1000, WorkerID: "w2", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, rest, 200, "the jobs never claimed are claimable, once each")
}

// TestNotifierReconnects: when the server drops the subscription's connection, the notifier
// delivers NotifyReconnect (anything may have been missed) and keeps delivering afterwards.
func TestNotifierReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	s, err := New(ctx, rdb, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	got := make(chan store.Notification, 100)
	defer s.Notifier().Subscribe(func(n store.Notification) { got <- n })()

	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	waitFor(t, got, func(n store.Notification) bool { return n.Kind == store.NotifyReconnect })
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Insert(ctx, []*store.InsertParams{testJob("after")})
		require.NoError(t, err)
		select {
		case n := <-got:
			if n.Kind == store.NotifyInsert && n.Queue == "after" {
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no insert notification after the reconnect")
		}
	}
}

func waitFor(t *testing.T, ch <-chan store.Notification, ok func(store.Notification) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-ch:
			if ok(n) {
				return
			}
		case <-timeout:
			t.Fatal("gave up waiting for a notification")
		}
	}
}

// TestClaimKindsNamedTwice: a kind named twice in a claim does not make its jobs claimed twice.
func TestClaimKindsNamedTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	_, err := s.Insert(ctx, []*store.InsertParams{testJob("twice"), testJob("twice")})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "twice", Kinds: []string{"k", "k"}, Limit: 10, WorkerID: "w",
		LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	for _, j := range jobs {
		require.Equal(t, 1, j.Attempt)
	}
}

// TestOpenURL: Open takes redis:// URLs with a database number, and refuses bad ones without
// echoing a password.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	testClient(t) // fails with how to start Redis when there is none
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+testAddr+"/14", Options{Prefix: "prontotest:" + uuidv7.New() + ":"})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = Open(ctx, "redis://u:hunter2@[::1", Options{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	prefix := "prontotest:" + uuidv7.New() + ":"
	s2, err := Open(ctx, "redis://"+testAddr+"/14?key_prefix="+prefix+"&pool_size=2", Options{})
	require.NoError(t, err)
	require.Equal(t, prefix, s2.Prefix(), "key_prefix sets the prefix; the other options go to go-redis")
	require.NoError(t, s2.Close())
	_, err = New(ctx, s.rdb, Options{Prefix: "a{b}"})
	require.Error(t, err)
	require.False(t, errors.Is(err, store.ErrNotFound))
}

// TestLargeBatch: a batch of thousands of jobs is one insert (no Lua limit on how many values a
// script spreads at once gets in the way).
func TestLargeBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	ps := make([]*store.InsertParams, 5000)
	for i := range ps {
		ps[i] = testJob("large")
	}
	_, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "large", Limit: 5000, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 5000)
}

// TestInsertAnnouncedToOthers: the one-call insert publishes from its script; another store on the
// same prefix gets the announcement (queue, due time of a future job, a brace in the queue name),
// and this store gets it once, locally, not again as its own echo.
func TestInsertAnnouncedToOthers(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t)
	s2, err := New(ctx, testClient(t), Options{Prefix: s.Prefix()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	mine := make(chan store.Notification, 100)
	theirs := make(chan store.Notification, 100)
	defer s.Notifier().Subscribe(func(n store.Notification) { mine <- n })()
	defer s2.Notifier().Subscribe(func(n store.Notification) { theirs <- n })()

	_, err = s.Insert(ctx, []*store.InsertParams{testJob(`odd "{q}"`)})
	require.NoError(t, err)
	waitFor(t, theirs, func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == `odd "{q}"` && n.DueAt.IsZero()
	})

	due := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
	later := testJob("later")
	later.State, later.ScheduledAt = store.StateScheduled, due
	_, err = s.Insert(ctx, []*store.InsertParams{later})
	require.NoError(t, err)
	waitFor(t, theirs, func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == "later" && n.DueAt.Equal(due)
	})
	// Both inserts reached this store once each: nothing else is queued after its two.
	waitFor(t, mine, func(n store.Notification) bool { return n.Queue == `odd "{q}"` })
	waitFor(t, mine, func(n store.Notification) bool { return n.Queue == "later" })
	time.Sleep(50 * time.Millisecond) // an echo, if it were delivered, would be here by now
	require.Empty(t, mine, "the store's own announcement came back from Redis")
}

// TestLibraryLoadedOnDemand: the store's function library is loaded by the first call that finds
// it missing (a fresh or flushed server), for a single call and inside a pipeline alike, so that
// Migrate stays optional.
func TestLibraryLoadedOnDemand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(ctx, rdb, Options{}) // no Migrate
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	flush := func() { require.NoError(t, rdb.FunctionFlush(ctx).Err()) }

	one := testJob("lib")
	_, err = s.Insert(ctx, []*store.InsertParams{one}) // a single call
	require.NoError(t, err)
	flush()
	_, err = s.Insert(ctx, []*store.InsertParams{testJob("lib"), testJob("lib-b")}) // pipelined
	require.NoError(t, err)
	flush()
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "lib", Limit: 2, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	flush()
	res, err := s.Finish(ctx, []store.Completion{ // pipelined
		{ID: jobs[0].ID, Attempt: 1, Token: jobs[0].ClaimToken, State: store.StateCompleted},
		{ID: jobs[1].ID, Attempt: 1, Token: jobs[1].ClaimToken, State: store.StateCompleted},
	})
	require.NoError(t, err)
	require.True(t, res[0].Applied && res[1].Applied)
	got, err := s.GetJob(ctx, one.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, got.State)
}
