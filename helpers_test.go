package pronto_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// storeKind names a backend the client tests run on.
type storeKind string

const (
	kindMemory   storeKind = "memory"
	kindSQLite   storeKind = "sqlite"
	kindPostgres storeKind = "postgres"
)

// kindRedis is the Redis store on the machine's Redis (PRONTO_TEST_REDIS_ADDR, default
// 127.0.0.1:6379), under a key prefix of its own; tests that name it run there too (store/redis's
// own tests cover the store; these cover client behaviour that meets its hand-off).
const kindRedis storeKind = "redis"

// allStores are every store: the client's store-by-store tests run on each.
var allStores = []storeKind{kindMemory, kindSQLite, kindPostgres, kindRedis}

// testStore is a fresh store plus a way to open more instances over the same data (more "clients").
type testStore struct {
	store.Store
	kind   storeKind
	schema string // postgres
	path   string // sqlite
	url    string // redis
	reopen func(t testing.TB) store.Store
}

func newTestStore(t testing.TB, kind storeKind) *testStore {
	t.Helper()
	ctx := context.Background()
	switch kind {
	case kindMemory:
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return &testStore{Store: s, kind: kind, reopen: func(testing.TB) store.Store { return s }}
	case kindSQLite:
		path := filepath.Join(t.TempDir(), "jobs.db")
		open := func(t testing.TB) store.Store {
			s, err := sqlite.Open(ctx, path)
			require.NoError(t, err)
			require.NoError(t, s.Migrate(ctx))
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		s := open(t)
		return &testStore{Store: s, kind: kind, path: path, reopen: open}
	case kindPostgres:
		schema := testdb.Schema(t)
		open := func(t testing.TB) store.Store {
			s, err := postgres.New(testdb.NewPool(t, 4), postgres.Config{Schema: schema})
			require.NoError(t, err)
			require.NoError(t, s.Migrate(ctx))
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		s := open(t)
		return &testStore{Store: s, kind: kind, schema: schema, reopen: open}
	}
	if kind == kindRedis {
		// The keys are deleted when the test ends (redistest.KeyPrefix).
		url := "redis://" + redistest.Addr() + "/0?key_prefix=" + redistest.KeyPrefix(t)
		open := func(t testing.TB) store.Store {
			s, err := redisstore.Open(ctx, url, redisstore.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		s := open(t)
		return &testStore{Store: s, kind: kind, url: url, reopen: open}
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// forEachStore runs f as a parallel subtest per store.
func forEachStore(t *testing.T, f func(t *testing.T, ts *testStore)) {
	forEachStoreOf(t, allStores, f)
}

// forEachStoreOf runs f as a parallel subtest per backend of kinds.
func forEachStoreOf(t *testing.T, kinds []storeKind, f func(t *testing.T, ts *testStore)) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			f(t, newTestStore(t, k))
		})
	}
}

// heldConfig is fastConfig with a one-minute lease, for tests whose workers hold jobs at a gate and
// that do not test leases: a stall of a loaded machine must not lapse a held job's lease, or the
// rescue would run it again beside the held run (two flaky tests failed in CI so).
func heldConfig(workers *pronto.Workers, queues map[string]pronto.QueueConfig) *pronto.Config {
	cfg := fastConfig(workers, queues)
	cfg.LeaseDuration, cfg.HeartbeatInterval = time.Minute, time.Second
	return cfg
}

// fastConfig returns a config with short intervals so tests about leases and retries run quickly.
func fastConfig(workers *pronto.Workers, queues map[string]pronto.QueueConfig) *pronto.Config {
	return &pronto.Config{
		Queues:            queues,
		Workers:           workers,
		LeaseDuration:     time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		PollInterval:      200 * time.Millisecond,
		RescueInterval:    100 * time.Millisecond,
		LeaderTTL:         time.Second,
		RetryPolicy:       pronto.RetryPolicy{InitialInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond},
	}
}

// startClient builds and starts a client, stopping it when the test ends.
func startClient(t *testing.T, s store.Store, cfg *pronto.Config) *pronto.Client {
	t.Helper()
	c, err := pronto.NewClient(s, cfg)
	require.NoError(t, err)
	startBuilt(t, c)
	return c
}

// startBuilt starts a client built by the test, stopping it when the test ends.
func startBuilt(t *testing.T, c *pronto.Client) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

func defaultQueue(n int) map[string]pronto.QueueConfig {
	return map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: n}}
}

// waitState waits until the job reaches state and returns it. Giving up after 15 s, it reports the
// job as it last was: its state, attempt and errors say which way it went instead.
func waitState(t *testing.T, c *pronto.Client, id string, state pronto.State) *pronto.JobRow {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		j, err := c.JobGet(context.Background(), id)
		require.NoError(t, err)
		if j.State == state {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never reached %s: last %s at attempt %d of %d, errors %+v",
				id, state, j.State, j.Attempt, j.MaxAttempts, j.Errors)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runLog records which jobs ran, how often, and in what order.
type runLog struct {
	mu    sync.Mutex
	order []string
	runs  map[string]int
}

func newRunLog() *runLog { return &runLog{runs: make(map[string]int)} }

func (l *runLog) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, id)
	l.runs[id]++
}

func (l *runLog) snapshot() ([]string, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.runs))
	for k, v := range l.runs {
		m[k] = v
	}
	return append([]string(nil), l.order...), m
}

// Test job kinds.

type echoArgs struct {
	Message string `json:"message"`
	N       int    `json:"n"`
}

func (echoArgs) Kind() string { return "test.echo" }

type failArgs struct {
	FailTimes int    `json:"fail_times"`
	Mode      string `json:"mode"` // "error", "panic", "cancel", "discard", "snooze", "timeout"
}

func (failArgs) Kind() string { return "test.fail" }

type blockArgs struct {
	Key string `json:"key"`
}

func (blockArgs) Kind() string { return "test.block" }
