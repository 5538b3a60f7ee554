package redis

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/store"
)

// outageStore returns a store made by Open on a private redis-server, holding one claimed job
// (with its completion), and a function that takes the server down: killed (its port refuses
// connections) or stopped (SIGSTOP: connections accepted, never answered; SIGCONT at cleanup).
func outageStore(t *testing.T, mode string) (*Store, store.Completion, func()) {
	t.Helper()
	srv := redistest.StartServer(t, "--appendonly", "no")
	proc := serverProcess(t, srv.Addr())
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+srv.Addr()+"/0", Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	_, err = s.Insert(ctx, []*store.InsertParams{testJob("outage")})
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "outage", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	done := store.Completion{ID: jobs[0].ID, Attempt: jobs[0].Attempt, Token: jobs[0].ClaimToken, State: store.StateCompleted}
	down := func() {
		if mode == "killed" {
			srv.Kill()
			return
		}
		require.NoError(t, proc.Signal(syscall.SIGSTOP))
		// Registered after the store's Close, so run before it (and before the server's kill).
		t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, done, down
}

// TestOutageErrorsNameRedis: with Redis killed or stopped, every kind of call fails with an error
// that says Redis could not be reached (errUnreachable, "cannot reach Redis"), wrapping go-redis's,
// and, when the call's own deadline ended it, that is still errors.Is context.DeadlineExceeded.
// Before, only the client registry's errors said so (667c0ac): an insert, a claim, a signal, an
// election or a finish failed with go-redis's bare "connection refused" or "i/o timeout".
func TestOutageErrorsNameRedis(t *testing.T) {
	for _, mode := range []string{"killed", "stopped"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s, done, down := outageStore(t, mode)
			n, err := NewNotifier(context.Background(), s.Client(), NotifierOptions{Channel: "outage:{relay}"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = n.Close() })
			down()
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"insert", func(ctx context.Context) error {
					_, err := s.Insert(ctx, []*store.InsertParams{testJob("outage")})
					return err
				}},
				{"claim", func(ctx context.Context) error {
					_, err := s.Claim(ctx, store.ClaimParams{Queue: "outage", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
					return err
				}},
				{"producer claim", func(ctx context.Context) error {
					_, err := s.Claim(producer.LoopContext(ctx), store.ClaimParams{Queue: "outage", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
					return err
				}},
				{"signal", func(ctx context.Context) error {
					return s.Notifier().Signal(ctx, []store.Notification{{Kind: store.NotifyPresence, Client: "c"}})
				}},
				{"notifier signal", func(ctx context.Context) error {
					return n.Signal(ctx, []store.Notification{{Kind: store.NotifyPresence, Client: "c"}})
				}},
				{"notifier publish", func(ctx context.Context) error {
					return n.Publish(ctx, []store.Notification{{Kind: store.NotifyInsert, Queue: "q"}, {Kind: store.NotifyInsert, Queue: "r"}})
				}},
				{"elect", func(ctx context.Context) error {
					_, err := s.Elect(ctx, "outage", "c", time.Minute)
					return err
				}},
				{"finish", func(ctx context.Context) error {
					_, err := s.Finish(ctx, []store.Completion{done})
					return err
				}},
			}
			for _, c := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := c.call(ctx)
				cancel()
				require.Error(t, err, c.name)
				require.ErrorIs(t, err, errUnreachable, "%s: %v", c.name, err)
				require.ErrorContains(t, err, "cannot reach Redis", c.name)
				if mode == "stopped" {
					require.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", c.name, err)
				} else {
					require.True(t, store.IsUnavailable(s, err), "%s: %v", c.name, err)
				}
				t.Logf("%s: %v", c.name, err)
			}
		})
	}
}

// TestClientStopRedisStopped: a started client with a worker stops by its Stop's deadline while its
// Redis is stopped (SIGSTOP: connections accepted, never answered), returning ctx's error, as no
// outcome or record could be written. Before, Stop waited beyond its ctx for the producers' claims
// in flight, the client's record's removal, a final signal and the outcomes' writes: Stop with
// 2 s took 19 s.
func TestClientStopRedisStopped(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "no")
	proc := serverProcess(t, srv.Addr())
	s, err := Open(context.Background(), "redis://"+srv.Addr()+"/0", Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ran := make(chan string, 10)
	c, err := pronto.NewClient(s, relayWorkerConfig(nil, func(id string) { ran <- id }))
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	_, err = c.Insert(context.Background(), relayArgs{}, nil)
	require.NoError(t, err)
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run")
	}
	require.NoError(t, proc.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) }) // before the store's Close
	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx) }()
	select {
	case err = <-stopped:
	case <-time.After(deadline + 3*time.Second):
		t.Fatalf("Stop(%v) did not return within %v with Redis stopped", deadline, deadline+3*time.Second)
	}
	t.Logf("Stop(%v) returned after %v: %v", deadline, time.Since(began), err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The shutdown went on in the background; once Redis answers again it ends, and a second Stop
	// waits for it and returns its result (no job had to be cancelled).
	require.NoError(t, proc.Signal(syscall.SIGCONT))
	again, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began = time.Now()
	require.NoError(t, c.Stop(again))
	t.Logf("the shutdown ended %v after Redis answered again", time.Since(began))
}
