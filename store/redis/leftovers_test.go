package redis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/testlog"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// handoffKeysLeft returns the hand-off keys of queue that are still in Redis: the set of
// advertisements, and any waiter's claim arguments, inbox or got list.
func handoffKeysLeft(t *testing.T, s *Store, queue string) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	b := s.qkey(queue)
	iter := s.rdb.Scan(ctx, 0, b+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := strings.TrimPrefix(iter.Val(), b)
		if k == "wait" || strings.HasPrefix(k, "w:") || strings.HasPrefix(k, "in:") || strings.HasPrefix(k, "got:") {
			left = append(left, k)
		}
	}
	require.NoError(t, iter.Err())
	return left
}

// TestHandoffDeadWaiterLeavesNoKeys: a process dies (here: its waiter freezes for good, and the
// store is never closed while it matters) just after its pop moved a handed job onto its got list,
// with an advertisement of its producer written after. Its hand-off keys are gone within a bounded
// time: the got list expires gotTTL (shortened here) after the waiter last renewed it, the set of
// advertisements once the advertisement has lapsed. The job itself is rescued at lease end, as any
// job of a dead process. Before, the got list and the set had no expiry and stayed in Redis for good.
func TestHandoffDeadWaiterLeavesNoKeys(t *testing.T) {
	loop := loopContext(t)
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.gotTTL = 2 * time.Second // before its first waiter starts
	const queue = "lo-dead"
	p := loopClaim(queue)
	_, err := a.Claim(loop, p)
	require.NoError(t, err)

	frozen := make(chan struct{})
	release := make(chan struct{})
	onStep(t, a, func(_ *waiter, step string) {
		if step == "popped" {
			close(frozen)
			<-release // dead: nothing after the pop runs until the test ends
		}
	})
	// Runs before the store's Close (cleanups run last first), which waits for the waiter.
	t.Cleanup(func() { close(release) })

	in := testJob(queue)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	select {
	case <-frozen:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing handed")
	}
	// The producer advertises once more before the process dies; no claim or insert follows.
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.NotEmpty(t, handoffKeysLeft(t, a, queue))

	// The advertisement lapses adTTL after it was written; the got list gotTTL after its renewal.
	deadline := time.Now().Add(adTTL + 30*time.Second)
	for {
		left := handoffKeysLeft(t, a, queue)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left by the dead waiter: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "the handed job waits for the rescue")
}

// closeHook turns the waiters' own claims (FCALL of the Claim function outside a producer's loop)
// into Close racing Redis's answer: the claim runs in Redis, then the store closes, and only then
// does the answer come back. With report, the answer is replaced by the context's error once the
// context is cancelled, as a client whose hooks honour cancellation reports a command cut short
// (go-redis itself cuts a read only at a deadline, not at a cancellation).
type closeHook struct {
	s      **Store
	report bool
	t      *testing.T
	ran    chan (<-chan struct{})
}

func (h *closeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *closeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *closeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		if producer.InLoop(ctx) || len(args) < 2 || cmd.Name() != "fcall" || args[1] != scriptClaim.fname() || len(h.ran) > 0 {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		h.ran <- closeDuring(h.t, *h.s)
		if h.report && ctx.Err() != nil {
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return err
	}
}

// TestHandoffWaiterClaimCloseAsRedisAnswers: a waiter claims for the slots its producer left free
// (two jobs available), and Close cancels the waiters' context just as Redis answers. The jobs
// that claim took are given back, available with their attempt refunded, once Close returns, both
// when the answer arrives (go-redis does not cut a read for a cancellation) and when the client
// reports the cancellation instead. Before, the claim ran under the context Close cancels: a client
// reporting the cancellation lost the answer, and the two jobs stayed active, claimed by nobody,
// until their leases ended.
func TestHandoffWaiterClaimCloseAsRedisAnswers(t *testing.T) {
	for _, report := range []bool{false, true} {
		t.Run(fmt.Sprintf("report=%v", report), func(t *testing.T) {
			loop := loopContext(t)
			ctx := context.Background()
			prefix := "prontotest:" + uuidv7.New() + ":"
			b := storeWithPrefix(t, prefix)
			var a *Store
			h := &closeHook{s: &a, report: report, t: t, ran: make(chan (<-chan struct{}), 1)}
			rdb := goredis.NewClient(&goredis.Options{Addr: testAddr, PoolSize: 8})
			rdb.AddHook(h) // before the store uses it
			t.Cleanup(func() { _ = rdb.Close() })
			a, err := New(ctx, rdb, Options{Prefix: prefix})
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Close() })
			notes := make(chan store.Notification, 100)
			t.Cleanup(a.Notifier().Subscribe(func(n store.Notification) { notes <- n }))
			handed := func(n store.Notification) bool {
				return n.Kind == store.NotifyInsert && n.Queue == "lo-close" && n.Nonce == 0
			}

			p := loopClaim("lo-close")
			p.Limit = 3
			_, err = a.Claim(loop, p)
			require.NoError(t, err)
			first := testJob("lo-close")
			_, err = b.Insert(ctx, []*store.InsertParams{first})
			require.NoError(t, err)
			waitFor(t, notes, handed)
			more := []*store.InsertParams{testJob("lo-close"), testJob("lo-close")}
			_, err = b.Insert(ctx, more) // a batch: not handed, available
			require.NoError(t, err)
			jobs, err := a.Claim(loop, p) // takes the handed job: the waiter claims for the two slots left
			require.NoError(t, err)
			require.Len(t, jobs, 1)
			require.Equal(t, first.ID, jobs[0].ID)
			select {
			case closed := <-h.ran:
				waitClosed(t, closed)
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter did not claim")
			}
			for _, in := range more {
				requireGivenBack(t, b, in.ID, in.MaxAttempts)
			}
		})
	}
}

// syncBuffer is testlog.Buffer, a log sink a logger and a test share.
type syncBuffer = testlog.Buffer

// serverProcess returns the process of the redis-server at addr (INFO's process_id).
func serverProcess(t *testing.T, addr string) *os.Process {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			require.NoError(t, err)
			p, err := os.FindProcess(pid)
			require.NoError(t, err)
			return p
		}
	}
	t.Fatal("INFO server has no process_id")
	return nil
}

// TestClientStartRedisDown: a pronto client starts on a store whose Redis went down (killed: its
// port refuses connections) or stopped (SIGSTOP: connections are accepted and never answered).
// Start returns at once (nothing in it waits for Redis: the client's record is written in the
// background and again every few seconds), and the record's failed write is logged, as is
// ClientList's error, naming Redis as unreachable. Before, the errors were go-redis's alone ("i/o
// timeout", "connection refused"), which did not say which service could not be reached.
func TestClientStartRedisDown(t *testing.T) {
	for _, mode := range []string{"killed", "stopped"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.StartServer(t, "--appendonly", "no")
			proc := serverProcess(t, srv.Addr())
			s, err := Open(context.Background(), "redis://"+srv.Addr()+"/0", Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			var logs syncBuffer
			cfg := relayWorkerConfig(nil, func(string) {})
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c, err := pronto.NewClient(s, cfg)
			require.NoError(t, err)
			if mode == "killed" {
				srv.Kill()
			} else {
				require.NoError(t, proc.Signal(syscall.SIGSTOP))
				// Before the server is killed (cleanups run last first), so that it can end.
				t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
			}
			started := make(chan error, 1)
			go func() { started <- c.Start(context.Background()) }()
			select {
			case err := <-started:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("Start did not return with Redis down")
			}
			t.Cleanup(func() {
				stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.Stop(stop)
			})
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(logs.String(), "writing the client's record failed") {
				if time.Now().After(deadline) {
					t.Fatalf("no failed write of the client's record logged:\n%s", logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			require.Contains(t, logs.String(), "cannot reach Redis")
			list, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = c.ClientList(list)
			require.ErrorContains(t, err, "cannot reach Redis")
		})
	}
}
