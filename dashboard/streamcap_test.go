package dashboard_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/dashboard"
)

// TestEventStreamsCapped: the dashboard's event streams are bounded (Config.MaxStreams), as the OJS
// API's progress streams are: each holds a connection and a goroutine, and any number could be
// opened. One past the bound answers 503 with Retry-After, and a stream that ends frees its place.
func TestEventStreamsCapped(t *testing.T) {
	srv, _ := newDashboard(t, dashboard.Config{MaxStreams: 2})
	open := func() *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var streams []*http.Response
	t.Cleanup(func() {
		for _, r := range streams {
			_ = r.Body.Close()
		}
	})
	for i := 0; i < 2; i++ {
		r := open()
		streams = append(streams, r)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of 2: %d", i+1, r.StatusCode)
		}
	}
	r := open()
	if r.StatusCode == http.StatusOK {
		_ = r.Body.Close() // a stream: its body never ends
		t.Fatal("a third stream with MaxStreams 2 opened (200); want 503 with Retry-After")
	}
	body, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "at most 2") {
		t.Fatalf("a third stream with MaxStreams 2: %d Retry-After %q %s; want 503 with Retry-After naming the bound",
			r.StatusCode, r.Header.Get("Retry-After"), body)
	}
	// A closed stream frees its place once its handler sees the connection gone.
	_ = streams[0].Body.Close()
	streams = streams[1:]
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := open()
		if r.StatusCode == http.StatusOK {
			streams = append(streams, r)
			break
		}
		_ = r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a stream still refused 20 s after one of the 2 closed: %d", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
