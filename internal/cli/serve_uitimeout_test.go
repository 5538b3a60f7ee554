package cli

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeUIRequestTimeout: --ui-request-timeout reaches the dashboard. With a nanosecond every
// dashboard API request runs past it and is answered 503 naming the timeout and its length; with
// 0 (no bound) the same request is answered.
func TestServeUIRequestTimeout(t *testing.T) {
	get := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for timeout, want := range map[string]int{"1ns": 503, "0": 200} {
		t.Run(timeout, func(t *testing.T) {
			db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
			base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db, "--ui-request-timeout", timeout)
			defer stop()
			code, body := get(base, "/api/overview")
			if code != want {
				t.Fatalf("--ui-request-timeout %s: /api/overview %d %.300s; want %d", timeout, code, body, want)
			}
			if want == 503 && !strings.Contains(body, "request timeout (1ns)") {
				t.Fatalf("the 503 does not name the timeout: %.300s", body)
			}
		})
	}
}
