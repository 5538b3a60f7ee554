package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/dashboard"
)

// hubGoroutines reports how many goroutines run the hub's loop and the event-stream handler.
func hubGoroutines() (loops, streams int) {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	s := b.String()
	return strings.Count(s, "dashboard.(*hub).loop"), strings.Count(s, "dashboard.(*Handler).events")
}

// Twenty tabs open the event stream and close: every stream handler returns and the hub's loop
// stops, so an unwatched dashboard reads nothing.
func TestClosedTabsLeaveNoGoroutines(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{})
	var cancels []context.CancelFunc
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "retry:") {
			t.Fatalf("stream start %q: %v", line, err)
		}
	}
	if loops, streams := hubGoroutines(); loops == 0 || streams < 20 {
		t.Fatalf("while 20 tabs watch: %d hub loops, %d stream handlers", loops, streams)
	}
	for _, c := range cancels {
		c()
	}
	// A bound on the wait, not a timing assertion: the loop notices at its next tick.
	deadline := time.Now().Add(20 * time.Second)
	for {
		loops, streams := hubGoroutines()
		if loops == 0 && streams == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after every tab closed: %d hub loops and %d stream handlers still run", loops, streams)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
