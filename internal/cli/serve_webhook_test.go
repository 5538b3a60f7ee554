package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeWebhooks: pronto serve delivers the events of a webhook registered through its admin API
// with its own workers (--webhook-workers, on by default); --webhook-workers -1 is a usage error.
func TestServeWebhooks(t *testing.T) {
	t.Parallel()
	got := make(chan map[string]any, 10)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &env); err != nil {
			t.Errorf("delivery body %q: %v", b, err)
		}
		got <- env
	}))
	t.Cleanup(endpoint.Close)
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", "sqlite:"+filepath.Join(t.TempDir(), "serve.db"))
	defer stop()
	post := func(path, body string, want int) map[string]any {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	post("/ojs/v1/admin/webhooks", `{"url":"`+endpoint.URL+`","types":["job.enqueued"],"queues":["hooked"]}`, 201)
	job := post("/ojs/v1/jobs", `{"type":"w.job","args":[],"options":{"queue":"hooked"}}`, 201)["job"].(map[string]any)["id"]
	select {
	case env := <-got:
		if env["type"] != "job.enqueued" || env["subject"] != job {
			t.Fatalf("delivered: %v", env)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20 s")
	}

	run(t, "serve", "--webhook-workers", "-1", "--database-url", "memory:").fails(t, ExitUsage, "--webhook-workers -1: must be 0 or more")
}
