package dashboard_test

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// flakyStore is a memory store whose queue and client reads can be slowed down or made to fail,
// as a busy or unreachable database would.
type flakyStore struct {
	*memory.Store
	down atomic.Bool
	// held, while set, holds every ListQueues until it is closed.
	held atomic.Pointer[chan struct{}]
}

// hold makes queue reads wait until the returned function is called.
func (s *flakyStore) hold() (release func()) {
	ch := make(chan struct{})
	s.held.Store(&ch)
	return func() { s.held.Store(nil); close(ch) }
}

// errRefused is what a database driver returns when nothing listens: its text names the host, as a
// DSN would, so the page must not show it.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5432},
	Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func (s *flakyStore) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	if s.down.Load() {
		return nil, errRefused
	}
	if ch := s.held.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.ListQueues(ctx)
}

func (s *flakyStore) ListClients(ctx context.Context, leader string) ([]store.ClientRecord, error) {
	if s.down.Load() {
		return nil, errRefused
	}
	return s.Store.ListClients(ctx, leader)
}

// serve serves a dashboard over s (no API key) and returns its URL and client.
func (s *flakyStore) serve(t *testing.T, cfg *pronto.Config) (string, *pronto.Client) {
	t.Helper()
	if cfg == nil {
		cfg = &pronto.Config{}
	}
	c, err := pronto.NewClient(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv.URL, c
}
