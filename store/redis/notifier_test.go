package redis

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// The helper process of TestNotifierAcrossProcesses: with notifyChildEnv set (to the SQLite path,
// a tab, and the channel), TestMain runs a worker client on that file with a Redis Notifier and a
// poll interval of an hour, prints "ready" once started and "done ID" as each job returns, and works
// until its standard input closes.
const notifyChildEnv = "PRONTO_REDIS_NOTIFY_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(notifyChildEnv); v != "" {
		os.Exit(runNotifyChild(v))
	}
	if v := os.Getenv(rateChildEnv); v != "" {
		os.Exit(runRateChild(v))
	}
	if v := os.Getenv(splitChildEnv); v != "" {
		os.Exit(runSplitChild(v))
	}
	os.Exit(m.Run())
}

type relayArgs struct {
	N int `json:"n"`
}

func (relayArgs) Kind() string { return "relay.test" }

// hourPoll is a poll interval no test waits out: a job found within a test's deadline was found by
// a notification.
const hourPoll = time.Hour

func relayWorkerConfig(n pronto.Notifier, onDone func(id string)) *pronto.Config {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[relayArgs]) error {
		onDone(j.ID)
		return nil
	}))
	return &pronto.Config{
		Queues: map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 4}}, Workers: ws,
		PollInterval: hourPoll, Notifier: n,
	}
}

func runNotifyChild(v string) int {
	path, channel, _ := strings.Cut(v, "\t")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	n, err := OpenNotifier(ctx, "redis://"+testAddr+"/0?channel="+channel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer n.Close()
	var mu sync.Mutex
	c, err := pronto.NewClient(st, relayWorkerConfig(n, func(id string) {
		mu.Lock()
		fmt.Printf("done %s\n", id)
		mu.Unlock()
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Stop(sctx)
	return 0
}

func testNotifier(t *testing.T, channel string) *Notifier {
	t.Helper()
	n, err := NewNotifier(context.Background(), testClient(t), NotifierOptions{Channel: channel})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// collect gathers notifications.
type collect struct {
	mu sync.Mutex
	ns []store.Notification
}

func (c *collect) add(n store.Notification) {
	c.mu.Lock()
	c.ns = append(c.ns, n)
	c.mu.Unlock()
}

func (c *collect) has(pred func(store.Notification) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.ns {
		if pred(n) {
			return true
		}
	}
	return false
}

// TestNotifierDelivery: Publish reaches the other notifiers on the channel and not its own
// subscribers; Signal reaches both; a notifier on another channel hears nothing; kinds other than
// client signals are refused by Signal.
func TestNotifierDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ch := "prontotest:{relay-" + uuidv7.New() + "}"
	a, b, other := testNotifier(t, ch), testNotifier(t, ch), testNotifier(t, ch+"x")
	var ga, gb, go_ collect
	defer a.Subscribe(ga.add)()
	defer b.Subscribe(gb.add)()
	defer other.Subscribe(go_.add)()

	due := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
	require.NoError(t, a.Publish(ctx, []store.Notification{
		{Kind: store.NotifyInsert, Queue: "q1", Nonce: 7},
		{Kind: store.NotifyInsert, Queue: "q2", DueAt: due},
		{Kind: store.NotifyCancel, JobID: "j1"},
	}))
	require.NoError(t, a.Signal(ctx, []store.Notification{{Kind: store.NotifyPresence, Client: "c1", Queue: "q1", Fingerprint: "f"}}))
	require.Eventually(t, func() bool {
		return gb.has(func(n store.Notification) bool { return n.Kind == store.NotifyPresence && n.Client == "c1" })
	}, 10*time.Second, 5*time.Millisecond)
	// One publisher's notifications arrive in order: the signal came last.
	require.True(t, gb.has(func(n store.Notification) bool {
		return n.Kind == store.NotifyInsert && n.Queue == "q1" && n.Nonce == 7
	}))
	require.True(t, gb.has(func(n store.Notification) bool { return n.Queue == "q2" && n.DueAt.Equal(due) }))
	require.True(t, gb.has(func(n store.Notification) bool { return n.Kind == store.NotifyCancel && n.JobID == "j1" }))
	require.True(t, ga.has(func(n store.Notification) bool { return n.Kind == store.NotifyPresence }), "a signal reaches its own process")
	require.False(t, ga.has(func(n store.Notification) bool { return n.Kind == store.NotifyInsert || n.Kind == store.NotifyCancel }),
		"Publish is not echoed to the publisher's own subscribers")
	// b's signal is the last thing anyone sends: once a has it, other would have had a's by now.
	require.NoError(t, b.Signal(ctx, []store.Notification{{Kind: store.NotifyGone, Client: "c2"}}))
	require.Eventually(t, func() bool {
		return ga.has(func(n store.Notification) bool { return n.Kind == store.NotifyGone && n.Client == "c2" })
	}, 10*time.Second, 5*time.Millisecond)
	require.False(t, go_.has(func(n store.Notification) bool { return n.Kind != store.NotifyReconnect }), "another channel hears nothing")

	require.ErrorContains(t, a.Signal(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: "q"}}), "not a client signal")
}

// TestOpenNotifierURL: the channel option is taken out of the URL; a bad URL is refused with its
// reason.
func TestOpenNotifierURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, err := OpenNotifier(ctx, "redis://"+testAddr+"/0?channel=prontotest:{url}&dial_timeout=3s")
	require.NoError(t, err)
	require.Equal(t, "prontotest:{url}", n.channel)
	require.NoError(t, n.Close())
	n, err = OpenNotifier(ctx, "redis://"+testAddr+"/0")
	require.NoError(t, err)
	require.Equal(t, DefaultNotifierChannel, n.channel)
	require.NoError(t, n.Close())
	_, err = OpenNotifier(ctx, "postgres://localhost/db")
	require.ErrorContains(t, err, "notifier URL")
}

// waitCompleted waits until job id is completed in st.
func waitCompleted(t *testing.T, st store.Store, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		j, err := st.GetJob(context.Background(), id)
		return err == nil && j.State == store.StateCompleted
	}, 30*time.Second, 10*time.Millisecond, "job %s was not picked up: its insert did not reach the worker (the poll is an hour)", id)
}

// TestNotifierAcrossProcesses: a worker process and this one share a SQLite file, each with a
// Redis Notifier (two stores on one file in one process share their notifications already, so the
// worker is a process of its own). The worker polls once an hour, yet it works every job this
// process inserts, each inserted only after the previous one completed, when the worker is idle.
func TestNotifierAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	ch := "prontotest:{relay-" + uuidv7.New() + "}"
	st, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NoError(t, st.Migrate(ctx))

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), notifyChildEnv+"="+path+"\t"+ch)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the worker process exited")
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("the worker process said nothing for 30 s (its poll is an hour)")
			return ""
		}
	}
	require.Equal(t, "ready", next())

	producer, err := pronto.NewClient(st, &pronto.Config{Notifier: testNotifier(t, ch)})
	require.NoError(t, err)
	for i := range 5 {
		res, err := producer.Insert(ctx, relayArgs{N: i}, nil)
		require.NoError(t, err)
		require.Equal(t, "done "+res.ID, next())
		waitCompleted(t, st, res.ID)
	}
}

// TestNotifierResubscribes: after its subscription connection is killed, a Notifier delivers
// NotifyReconnect (anything sent meanwhile was missed) and then what other notifiers publish again.
func TestNotifierResubscribes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--appendonly", "no")
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	a, err := NewNotifier(ctx, rdb, NotifierOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := NewNotifier(ctx, rdb, NotifierOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	got := make(chan store.Notification, 100)
	defer a.Subscribe(func(n store.Notification) { got <- n })()

	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	waitFor(t, got, func(n store.Notification) bool { return n.Kind == store.NotifyReconnect })
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.NoError(t, b.Publish(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: "after"}}))
		select {
		case n := <-got:
			if n.Kind == store.NotifyInsert && n.Queue == "after" {
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no notification after the resubscription")
		}
	}
}

// TestNotifierPostgresWithoutListen: two PostgreSQL stores on one schema whose listeners cannot
// connect (as behind a pooler that cannot LISTEN, with no direct URL), each client with a Redis
// Notifier. The worker polls once an hour, yet it works every job the other client inserts, each
// inserted only after the previous one completed: the inserting client announced them.
func TestNotifierPostgresWithoutListen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	ch := "prontotest:{relay-" + uuidv7.New() + "}"
	open := func() store.Store {
		// Port 1 refuses connections: the listener never listens.
		st, err := postgres.New(testdb.NewPool(t, 3), postgres.Config{Schema: schema, ListenURL: "postgres://postgres@127.0.0.1:1/test?connect_timeout=1"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		require.NoError(t, st.Migrate(ctx))
		return st
	}
	producerStore, workerStore := open(), open()
	worker, err := pronto.NewClient(workerStore, relayWorkerConfig(testNotifier(t, ch), func(string) {}))
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = worker.Stop(sctx)
	})
	producer, err := pronto.NewClient(producerStore, &pronto.Config{Notifier: testNotifier(t, ch)})
	require.NoError(t, err)
	for i := range 5 {
		res, err := producer.Insert(ctx, relayArgs{N: i}, nil)
		require.NoError(t, err)
		waitCompleted(t, producerStore, res.ID)
	}
	many, err := producer.InsertMany(ctx, []pronto.InsertManyParams{{Args: relayArgs{N: 10}}, {Args: relayArgs{N: 11}}})
	require.NoError(t, err)
	for _, j := range many {
		waitCompleted(t, producerStore, j.ID)
	}
}

// TestEncodeInsert: the insert announcement written without reflection is what encodeNotification
// writes, and queue names it leaves to encodeNotification decode as given.
func TestEncodeInsert(t *testing.T) {
	for _, q := range []string{"default", "a-b.c:d", "we{ird}", `quo"te`, `back\slash`, "tab\there", "ünï", "a<b>&c", ""} {
		want := encodeNotification(store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: 42}, "abc123")
		require.Equal(t, want, encodeInsert(q, 42, "abc123"), q)
		n, from, ok := decodeNotification(encodeInsert(q, 42, "abc123"))
		require.True(t, ok, q)
		require.Equal(t, "abc123", from)
		require.Equal(t, store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: 42}, n, q)
	}
}
