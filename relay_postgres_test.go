package pronto_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

// relayHourPoll is a poll no test waits out: a job picked up at all was woken by a notification.
const relayHourPoll = time.Hour

// relayDeadline is how long a test waits for a pushed pickup (generous; the poll is an hour).
const relayDeadline = 20 * time.Second

type relayArgs struct {
	N int `json:"n"`
}

func (relayArgs) Kind() string { return "relay.args" }

// relayDone records the jobs the workers ran.
type relayDone struct {
	mu  sync.Mutex
	ids map[string]int
}

func (d *relayDone) add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ids == nil {
		d.ids = map[string]int{}
	}
	d.ids[id]++
}

func (d *relayDone) has(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids[id] > 0
}

// relayWorkerConfig: one queue, poll an hour, the given notifier.
func relayWorkerConfig(n pronto.Notifier, done *relayDone, queues ...string) *pronto.Config {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[relayArgs]) error {
		done.add(j.ID)
		return nil
	}))
	if len(queues) == 0 {
		queues = []string{pronto.DefaultQueue}
	}
	qs := map[string]pronto.QueueConfig{}
	for _, q := range queues {
		qs[q] = pronto.QueueConfig{MaxWorkers: 2}
	}
	cfg := &pronto.Config{Queues: qs, Workers: ws, PollInterval: relayHourPoll}
	if n != nil {
		cfg.Notifier = n
	}
	return cfg
}

func relayStart(t *testing.T, s store.Store, cfg *pronto.Config) *pronto.Client {
	t.Helper()
	c, err := pronto.NewClient(s, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func relayRedis(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func relayNotifier(t *testing.T, rdb goredis.UniversalClient, channel string) *redisstore.Notifier {
	t.Helper()
	n, err := redisstore.NewNotifier(context.Background(), rdb, redisstore.NotifierOptions{Channel: channel})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// relayPGNoListen opens a migrated PostgreSQL store on schema whose listener cannot connect
// (as behind a transaction pooler, with no direct ListenURL): the deployment the relay is for (see
// store/redis TestNotifierPostgresWithoutListen, which sets it up the same way).
func relayPGNoListen(t *testing.T, schema string) *postgres.Store {
	t.Helper()
	st, err := postgres.New(testdb.NewPool(t, 3), postgres.Config{Schema: schema,
		ListenURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(context.Background()))
	return st
}

func relayWaitRan(t *testing.T, done *relayDone, id, msg string) {
	t.Helper()
	deadline := time.Now().Add(relayDeadline)
	for !done.has(id) {
		if time.Now().After(deadline) {
			t.Fatalf("job %s was not picked up within %s although the poll is an hour: %s", id, relayDeadline, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func relayChannel() string { return "prontotest:{relay-" + uuidv7.New() + "}" }

// relayTwoProcesses opens two stores on one new schema, as two processes would, neither able to
// LISTEN, and returns them with a maker of Notifiers on one new Redis channel (one per process).
func relayTwoProcesses(t *testing.T) (a, b *postgres.Store, notifier func() *redisstore.Notifier) {
	t.Helper()
	schema := testdb.Schema(t)
	rdb := relayRedis(t, "127.0.0.1:6379")
	ch := relayChannel()
	return relayPGNoListen(t, schema), relayPGNoListen(t, schema), func() *redisstore.Notifier { return relayNotifier(t, rdb, ch) }
}

// TestRelayPostgresWakesOwnProcess: PostgreSQL whose store cannot LISTEN, with a Redis Notifier.
// One client inserts and works the queue: its insert wakes its own workers. The relay used to
// announce an insert only to the *other* processes (Notifier.Publish is not echoed), as if the local
// ones had it from the store, which hears nothing without LISTEN: the job waited for the poll.
func TestRelayPostgresWakesOwnProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := relayPGNoListen(t, testdb.Schema(t))
	rdb := relayRedis(t, "127.0.0.1:6379")
	ch := relayChannel()

	var done relayDone
	c := relayStart(t, st, relayWorkerConfig(relayNotifier(t, rdb, ch), &done))
	// Start returns before the producer's first claim: let it run, so only a wake-up can find the job.
	time.Sleep(time.Second)
	row, err := c.Insert(ctx, relayArgs{N: 1}, nil)
	require.NoError(t, err)
	relayWaitRan(t, &done, row.ID,
		"an insert by a client with a Notifier does not wake the workers of its own process on PostgreSQL without LISTEN")
}

// TestRelayPostgresOwnerInInsertingProcess: as above, with a second process working the queue too.
// Each insert's nonce names one owner among the clients present on the channel; when it names the
// inserting process's own worker, the other process leaves the job to it, so that worker must hear
// the same announcement (it used to hear nothing, and the job waited for the poll).
func TestRelayPostgresOwnerInInsertingProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stA, stB, notifier := relayTwoProcesses(t)

	var done relayDone
	a := relayStart(t, stA, relayWorkerConfig(notifier(), &done))
	relayStart(t, stB, relayWorkerConfig(notifier(), &done))
	// Let each see the other's presence (announced every second).
	time.Sleep(2500 * time.Millisecond)
	for i := range 10 {
		row, err := a.Insert(ctx, relayArgs{N: i}, nil)
		require.NoError(t, err)
		relayWaitRan(t, &done, row.ID, fmt.Sprintf("insert #%d: is the owner the nonce chose the inserting process, which the relay did not tell?", i))
	}
}

// TestRelayPostgresInsertTxAfterCommit: PostgreSQL without LISTEN and a Redis Notifier. A job inserted
// in the application's transaction is announced once the transaction commits, so the worker of
// another process picks it up then. The relay used to announce it when InsertTx returned, before the
// commit: the woken worker's claim found nothing, no wake-up followed the commit, and the job waited
// for the poll.
func TestRelayPostgresInsertTxAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stIns, stW, notifier := relayTwoProcesses(t)

	var done relayDone
	relayStart(t, stW, relayWorkerConfig(notifier(), &done))
	ins, err := pronto.NewClient(stIns, &pronto.Config{Notifier: notifier()})
	require.NoError(t, err)

	// A plain Insert is picked up: the relay works.
	row, err := ins.Insert(ctx, relayArgs{N: 0}, nil)
	require.NoError(t, err)
	relayWaitRan(t, &done, row.ID, "plain Insert through the relay")

	for _, rollback := range []bool{true, false} {
		tx, err := stIns.Pool().Begin(ctx)
		require.NoError(t, err)
		row, err = ins.InsertTx(ctx, tx, relayArgs{N: 1}, nil)
		require.NoError(t, err)
		// The application goes on with its transaction a while before it ends it.
		time.Sleep(300 * time.Millisecond)
		if rollback {
			require.NoError(t, tx.Rollback(ctx))
			continue
		}
		require.NoError(t, tx.Commit(ctx))
	}
	relayWaitRan(t, &done, row.ID, "the job InsertTx stored was not announced after its transaction committed")
}

// TestRelayPostgresWorkflowRoots: PostgreSQL without LISTEN and a Redis Notifier. A workflow inserted
// by another process has roots available at once, and they are announced through the relay as plain
// inserts are. WorkflowInsert used to go around the insert middleware through which the relay
// announces a PostgreSQL client's inserts: nothing was announced, and the roots waited for the poll.
func TestRelayPostgresWorkflowRoots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stW, stI, notifier := relayTwoProcesses(t)
	var done relayDone
	relayStart(t, stW, relayWorkerConfig(notifier(), &done))
	ins, err := pronto.NewClient(stI, &pronto.Config{Notifier: notifier()})
	require.NoError(t, err)
	time.Sleep(time.Second)
	// Control: a plain insert from the same client is relayed.
	row, err := ins.Insert(ctx, relayArgs{N: 0}, nil)
	require.NoError(t, err)
	relayWaitRan(t, &done, row.ID, "plain Insert through the relay")

	res, err := ins.WorkflowInsert(ctx, pronto.NewWorkflow("relay-roots").Add("root", relayArgs{N: 1}, nil))
	require.NoError(t, err)
	relayWaitRan(t, &done, res.Jobs["root"].ID,
		"the root of a workflow inserted by a client with a Notifier was not announced through the relay")
}

// TestRelayCommitWatchEndsAtStop: on PostgreSQL with a Notifier, InsertTx starts a goroutine
// (afterCommit's) that waits for the transaction to commit; Stop ends it and waits for it. It used
// to be tied to nothing, polling the store after Stop returned (and, on any error but not-found, such
// as a closed pool, announcing the rolled-back job to the stopped client).
func TestRelayCommitWatchEndsAtStop(t *testing.T) {
	ctx := context.Background()
	st := relayPGNoListen(t, testdb.Schema(t))
	rdb := relayRedis(t, "127.0.0.1:6379")
	cfg := relayWorkerConfig(relayNotifier(t, rdb, relayChannel()), &relayDone{})
	cfg.PollInterval = 30 * time.Second
	c, err := pronto.NewClient(st, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))

	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, relayArgs{N: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))
	require.False(t, relayGoroutineRunning("afterCommit"),
		"a goroutine of the stopped client (afterCommit's) still runs after Stop returned")
}

// relayGoroutineRunning reports whether a goroutine of this process runs fn.
func relayGoroutineRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Contains(string(buf[:n]), fn)
}

// TestRelayPostgresInsertTxSlowCommit: a transaction that commits 1.5 s after its InsertTx is still
// announced. The wait used to end after the *inserting* client's PollInterval (1 s by default for an
// insert-only client), though the poll that would find the job is the workers' (here an hour).
func TestRelayPostgresInsertTxSlowCommit(t *testing.T) {
	ctx := context.Background()
	stIns, stW, notifier := relayTwoProcesses(t)
	var done relayDone
	relayStart(t, stW, relayWorkerConfig(notifier(), &done))
	ins, err := pronto.NewClient(stIns, &pronto.Config{Notifier: notifier()})
	require.NoError(t, err)
	tx, err := stIns.Pool().Begin(ctx)
	require.NoError(t, err)
	row, err := ins.InsertTx(ctx, tx, relayArgs{N: 1}, nil)
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // the application's transaction goes on a while
	require.NoError(t, tx.Commit(ctx))
	relayWaitRan(t, &done, row.ID, "a job InsertTx stored in a transaction longer than the inserter's PollInterval was not announced")
}

// relayCountingNotifier is a Notifier of one process that sends nothing anywhere: it counts the
// batches the relay publishes and hands each one's arrival to published.
type relayCountingNotifier struct {
	published chan int
}

func (n *relayCountingNotifier) Subscribe(func(store.Notification)) func()          { return func() {} }
func (n *relayCountingNotifier) Signal(context.Context, []store.Notification) error { return nil }
func (n *relayCountingNotifier) Publish(_ context.Context, ns []store.Notification) error {
	n.published <- len(ns)
	return nil
}

// relayProbeStore is a PostgreSQL store that records, per job id, the goroutines that read the job:
// the commit watches of an InsertTx read its new job back, each from a goroutine of its own.
type relayProbeStore struct {
	*postgres.Store
	mu      sync.Mutex
	readers map[string]map[string]bool // job id -> goroutine ids
}

func (s *relayProbeStore) GetJob(ctx context.Context, id string) (*store.Job, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)] // "goroutine N [running]:..."
	g, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	s.mu.Lock()
	if s.readers == nil {
		s.readers = map[string]map[string]bool{}
	}
	if s.readers[id] == nil {
		s.readers[id] = map[string]bool{}
	}
	s.readers[id][g] = true
	s.mu.Unlock()
	return s.Store.GetJob(ctx, id)
}

func (s *relayProbeStore) watchesOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.readers[id])
}

// relayInsertTxClient is an insert-only client on PostgreSQL without LISTEN with Config.Notifier
// set and an insert middleware that defers work with AfterInsertCommit, as promexport's does: the
// deferred work's runs arrive on ran.
func relayInsertTxClient(tb testing.TB, st store.Store, n pronto.Notifier, ran chan<- struct{}) *pronto.Client {
	tb.Helper()
	mw := func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
		rows, err := next(ctx, ps)
		if err == nil {
			pronto.AfterInsertCommit(ctx, func() { ran <- struct{}{} })
		}
		return rows, err
	}
	c, err := pronto.NewClient(st, &pronto.Config{Notifier: n, InsertMiddleware: []pronto.InsertMiddleware{mw}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// relayWaitFor waits for one value of ch, for at most relayDeadline.
func relayWaitFor[T any](tb testing.TB, ch <-chan T, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(relayDeadline):
		tb.Fatalf("%s did not happen within %s", what, relayDeadline)
	}
}

// TestRelayInsertTxOneCommitWatch: with Config.Notifier on PostgreSQL and an insert middleware that
// defers work with AfterInsertCommit, an InsertTx is watched for its commit by one goroutine, which
// announces the job and runs the deferred work. The relay used to start a watch of its own beside
// the one AfterInsertCommit's work runs from: two goroutines, timers and read-backs per transaction.
func TestRelayInsertTxOneCommitWatch(t *testing.T) {
	ctx := context.Background()
	st := &relayProbeStore{Store: relayPGNoListen(t, testdb.Schema(t))}
	n := &relayCountingNotifier{published: make(chan int, 16)}
	ran := make(chan struct{}, 16)
	c := relayInsertTxClient(t, st, n, ran)

	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	row, err := c.InsertTx(ctx, tx, relayArgs{N: 1}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	relayWaitFor(t, n.published, "the announcement of the committed job")
	relayWaitFor(t, ran, "the work deferred with AfterInsertCommit")
	require.Equal(t, 1, st.watchesOf(row.ID),
		"goroutines that read the job back to see its transaction commit (commit watches of one InsertTx)")
}

// BenchmarkInsertTxNotifier: one InsertTx in its own transaction, committed, with Config.Notifier set
// on PostgreSQL without LISTEN and an insert middleware deferring work with AfterInsertCommit (as
// promexport's does); each op waits until the job is announced and the deferred work ran, so the
// commit watching is in the measure.
func BenchmarkInsertTxNotifier(b *testing.B) {
	ctx := context.Background()
	st, err := postgres.New(testdb.NewPool(b, 3), postgres.Config{Schema: testdb.Schema(b),
		ListenURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=1"})
	require.NoError(b, err)
	b.Cleanup(func() { _ = st.Close() })
	require.NoError(b, st.Migrate(ctx))
	n := &relayCountingNotifier{published: make(chan int, 16)}
	ran := make(chan struct{}, 16)
	c := relayInsertTxClient(b, st, n, ran)
	b.ReportAllocs()
	for b.Loop() {
		tx, err := st.Pool().Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.InsertTx(ctx, tx, relayArgs{N: 1}, nil); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		relayWaitFor(b, n.published, "the announcement")
		relayWaitFor(b, ran, "the deferred work")
	}
}
