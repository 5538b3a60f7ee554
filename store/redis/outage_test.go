package redis

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
