package cli

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeMetricsAddrOnlyMetrics: --metrics-addr answered the metrics on every path ("/",
// "/ojs/v1/health", anything); it serves /metrics only, and 404 elsewhere, with the key as without.
func TestServeMetricsAddrOnlyMetrics(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	_, stop := startServe(t, map[string]string{EnvAPIKey: "k3y"}, "--addr", "127.0.0.1:0", "--database-url", db,
		"--metrics-addr", metricsAddr)
	defer stop()
	get := func(path string, key bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+metricsAddr+path, nil)
		if key {
			req.Header.Set("Authorization", "Bearer k3y")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics", true); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics on --metrics-addr: %d %.200s", code, body)
	}
	for _, path := range []string{"/", "/metrics/", "/metricsx", "/ojs/v1/health", "/debug/pprof/"} {
		if code, body := get(path, true); code != 404 {
			t.Fatalf("%s on --metrics-addr: %d %.200s; want 404", path, code, body)
		}
		if code, _ := get(path, false); code != 401 {
			t.Fatalf("%s on --metrics-addr without the key: %d; want 401", path, code)
		}
	}
}
