package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

// newKeylessServer returns an httptest server over a Server without an API key, wrapped in h.
func newKeylessServer(t *testing.T, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(wrap(srv))
	t.Cleanup(ts.Close)
	return ts
}

func send(t *testing.T, method, url, host string, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLoopbackGuard: a server without an API key, behind LoopbackGuard (as pronto serve runs it),
// refuses a request whose Host is not a loopback name (a page of attacker.example rebound to
// 127.0.0.1, which is then same-origin with it) with 403 forbidden, and serves loopback names and
// the allowed ones.
func TestLoopbackGuard(t *testing.T) {
	ts := newKeylessServer(t, func(h http.Handler) http.Handler {
		return server.LoopbackGuard(h, []string{"jobs.internal", "box:8080"})
	})
	job := `{"type":"evil.job","args":["rm -rf"]}`
	for _, host := range []string{"attacker.example:8080", "attacker.example", "127.0.0.1.attacker.example", "box:9090", "10.0.0.1"} {
		status, body := send(t, "POST", ts.URL+"/ojs/v1/jobs", host, job, "Origin", "http://"+host)
		if status != 403 || !strings.Contains(body, `"code":"forbidden"`) {
			t.Errorf("Host %s: %d %s", host, status, body)
		}
		if status, _ := send(t, "GET", ts.URL+"/ojs/v1/queues", host, ""); status != 403 {
			t.Errorf("GET with Host %s: %d", host, status)
		}
	}
	for _, host := range []string{"localhost:8080", "LOCALHOST", "app.localhost", "127.0.0.1:8080", "127.1.2.3", "[::1]:8080", "jobs.internal", "jobs.internal:443", "box:8080"} {
		if status, body := send(t, "POST", ts.URL+"/ojs/v1/jobs", host, `{"type":"ok.job","args":[]}`); status != 201 {
			t.Errorf("Host %s: %d %s", host, status, body)
		}
	}
}

// TestCrossSiteRequestRefused: a web page's fetch(..., {mode: "no-cors"}) to the API (a POST without
// a Content-Type, which a browser sends without a preflight, with the page's Origin) is refused 403
// forbidden, and changes nothing; a same-origin one, and one without an Origin (every OJS client),
// is served.
func TestCrossSiteRequestRefused(t *testing.T) {
	ts := newKeylessServer(t, func(h http.Handler) http.Handler { return h })
	host := strings.TrimPrefix(ts.URL, "http://")
	for _, hdr := range [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://" + host + ".evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		for _, path := range []string{"/ojs/v1/jobs", "/ojs/v1/queues/default/pause"} {
			body := `{"type":"evil.job","args":["payload"]}`
			if strings.Contains(path, "pause") {
				body = ""
			}
			if status, out := send(t, "POST", ts.URL+path, "", body, hdr...); status != 403 || !strings.Contains(out, `"code":"forbidden"`) {
				t.Errorf("%v POST %s: %d %s", hdr, path, status, out)
			}
		}
	}
	if status, out := send(t, "GET", ts.URL+"/ojs/v1/queues/default/stats", "", ""); status != 200 || strings.Contains(out, `"paused":true`) {
		t.Fatalf("a refused pause paused the queue: %d %s", status, out)
	}
	if status, out := send(t, "POST", ts.URL+"/ojs/v1/jobs", "", `{"type":"ok.job","args":[]}`, "Origin", "http://"+host); status != 201 {
		t.Errorf("same-origin enqueue: %d %s", status, out)
	}
	if status, out := send(t, "POST", ts.URL+"/ojs/v1/jobs", "", `{"type":"ok.job","args":[]}`); status != 201 {
		t.Errorf("enqueue without Origin: %d %s", status, out)
	}
	if status, _ := send(t, "GET", ts.URL+"/ojs/v1/health", "", "", "Origin", "https://evil.example"); status != 200 {
		t.Errorf("a cross-site GET of health: %d", status)
	}
}
