package pronto_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// The helper process: when PRONTO_TEST_WORKER is set, TestMain runs a worker client instead of the
// tests. It prints "leader" when it becomes the maintenance leader and "start ID" as each job starts,
// then works (slowly) until it is killed.
// With PRONTO_CHAOS_WORKER set, it runs the chaos suite's worker instead (see chaos_test.go).
func TestMain(m *testing.M) {
	if kind := os.Getenv(chaosWorkerEnv); kind != "" {
		os.Exit(runChaosWorker(kind))
	}
	if kind := os.Getenv("PRONTO_TEST_WORKER"); kind != "" {
		os.Exit(runHelperWorker(kind))
	}
	if mode := os.Getenv("PRONTO_TEST_EFFECT_WORKER"); mode != "" {
		os.Exit(runEffectHelper(mode))
	}
	os.Exit(m.Run())
}

type slowArgs struct {
	SleepMS int `json:"sleep_ms"`
}

func (slowArgs) Kind() string { return "test.slow" }

func runHelperWorker(kind string) int {
	ctx := context.Background()
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[slowArgs]) error {
		say("start %s", j.ID)
		select {
		case <-time.After(time.Duration(j.Args.SleepMS) * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}))
	cfg := fastConfig(workers, defaultQueue(10))
	var c *pronto.Client
	var err error
	switch kind {
	case "postgres":
		pool := testdb.NewPool(&helperTB{}, 5)
		s, e := postgres.New(pool, postgres.Config{Schema: os.Getenv("PRONTO_TEST_SCHEMA")})
		if e != nil {
			fmt.Fprintln(os.Stderr, e)
			return 1
		}
		c, err = pronto.NewClient(s, cfg)
	case "sqlite":
		s, e := sqlite.Open(ctx, os.Getenv("PRONTO_TEST_PATH"))
		if e != nil {
			fmt.Fprintln(os.Stderr, e)
			return 1
		}
		c, err = pronto.NewClient(s, cfg)
	case "redis":
		s, e := redisstore.Open(ctx, os.Getenv("PRONTO_TEST_URL"), redisstore.Options{})
		if e != nil {
			fmt.Fprintln(os.Stderr, e)
			return 1
		}
		c, err = pronto.NewClient(s, cfg)
	default:
		err = fmt.Errorf("no helper worker for store %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		if c.IsLeader() {
			say("leader")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {} // work until killed
}

// helperTB lets the helper process use testdb outside a test.
type helperTB struct{ testing.TB }

func (*helperTB) Helper()           {}
func (*helperTB) Cleanup(func())    {}
func (*helperTB) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (*helperTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// TestSIGKILLedWorkerProcess kills a worker process (which is also the maintenance leader) while it
// holds jobs: no job is lost, a surviving client takes over leadership, the dead process's jobs run
// again after their lease, and only jobs it held run twice.
func TestSIGKILLedWorkerProcess(t *testing.T) {
	for _, kind := range []storeKind{kindPostgres, kindSQLite, kindRedis} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts := newTestStore(t, kind)
			admin, err := pronto.NewClient(ts.Store, nil)
			require.NoError(t, err)
			const total = 60
			batch := make([]pronto.InsertManyParams, total)
			for i := range batch {
				batch[i] = pronto.InsertManyParams{Args: slowArgs{SleepMS: 400}}
			}
			_, err = admin.InsertMany(ctx, batch)
			require.NoError(t, err)

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PRONTO_TEST_WORKER="+string(kind), "PRONTO_TEST_SCHEMA="+ts.schema, "PRONTO_TEST_PATH="+ts.path, "PRONTO_TEST_URL="+ts.url)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

			// Read until the helper leads and has started 10 jobs (a full set of its worker slots).
			heldByHelper := map[string]bool{}
			isLeader := false
			lines := bufio.NewScanner(stdout)
			deadline := time.Now().Add(30 * time.Second)
			for (len(heldByHelper) < 10 || !isLeader) && time.Now().Before(deadline) && lines.Scan() {
				line := lines.Text()
				switch {
				case line == "leader":
					isLeader = true
				case strings.HasPrefix(line, "start "):
					heldByHelper[strings.TrimPrefix(line, "start ")] = true
				}
			}
			require.True(t, isLeader, "the helper process should have become leader")
			require.GreaterOrEqual(t, len(heldByHelper), 10)
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			// Everything the helper printed before dying.
			for lines.Scan() {
				if line := lines.Text(); strings.HasPrefix(line, "start ") {
					heldByHelper[strings.TrimPrefix(line, "start ")] = true
				}
			}
			killedAt := time.Now()

			log := newRunLog()
			workers := pronto.NewWorkers()
			pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[slowArgs]) error {
				log.add(j.ID)
				return nil
			}))
			survivor := startClient(t, ts.reopen(t), fastConfig(workers, defaultQueue(20)))
			require.Eventually(t, survivor.IsLeader, 10*time.Second, 10*time.Millisecond, "a surviving client takes over leadership")

			require.Eventually(t, func() bool {
				qs, err := survivor.QueueList(ctx)
				require.NoError(t, err)
				return len(qs) == 1 && qs[0].Counts[pronto.StateCompleted] == total
			}, 30*time.Second, 20*time.Millisecond, "every job completes: none is lost")

			rescued := 0
			list, err := survivor.JobList(ctx, &pronto.JobListParams{Limit: total})
			require.NoError(t, err)
			require.Len(t, list.Jobs, total)
			for _, j := range list.Jobs {
				if len(j.Errors) > 0 {
					require.True(t, heldByHelper[j.ID], "only jobs the killed process held were rescued")
					require.Equal(t, "lease_expired", j.Errors[0].Type)
					require.Equal(t, 2, j.Attempt)
					rescued++
				}
			}
			_, runs := log.snapshot()
			for id := range runs {
				require.Equal(t, 1, runs[id], "the survivor ran job %s once", id)
			}
			// Jobs the helper held and did not finish were rescued; each ran again here.
			require.Greater(t, rescued, 0)
			t.Logf("%s: helper held %d jobs, %d rescued, all %d done %.1fs after the kill",
				kind, len(heldByHelper), rescued, total, time.Since(killedAt).Seconds())
		})
	}
}
