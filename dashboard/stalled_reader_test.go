package dashboard_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// smallSendBuffers is a listener whose connections have a small kernel send buffer, so that a
// reader that stops reading blocks the server's writes after a few frames rather than megabytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestEventStreamStalledReaderEnds: an event stream whose reader stops reading without closing (a
// stalled proxy, a suspended laptop: the page has given up on it after three silent ping intervals
// and opened another) ends on the server once a write has waited that long, as the page's own
// watchdog does. Before, the stream cleared the server's write deadline for good, so its handler
// stayed blocked in a write forever: one such stream per stall piled up (a goroutine and a
// connection each), and neither Close nor a graceful shutdown could end it.
func TestEventStreamStalledReaderEnds(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Many queues make every update tens of kB, so the buffers fill within a few ticks.
	jobs := make([]pronto.InsertManyParams, 500)
	for i := range jobs {
		jobs[i] = pronto.InsertManyParams{Args: noteArgs{}, Opts: &pronto.InsertOpts{Queue: fmt.Sprintf("stalled-reader-queue-%03d", i)}}
	}
	if _, err := c.InsertMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 20 * time.Millisecond, PingInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(func() { h.Close(); srv.CloseClientConnections(); srv.Close() })

	open0, _ := dashboard.StreamCounts()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: %s\r\n\r\n", srv.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	// The stream opens; from now on this reader reads nothing and keeps the connection open.
	waitFor(t, 10*time.Second, "the stream to open", func() bool { open, _ := dashboard.StreamCounts(); return open == open0+1 })
	waitFor(t, 20*time.Second, "the stalled stream to end on the server", func() bool {
		open, _ := dashboard.StreamCounts()
		return open == open0
	})
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
