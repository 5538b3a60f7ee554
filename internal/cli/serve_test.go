package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServe runs `pronto serve` in-process and returns its base URL and a function that stops it
// and returns its exit code.
func startServe(t *testing.T, env map[string]string, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := Run(ctx, append([]string{"serve"}, args...), Env{Stdout: pw, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }, SharedMemory: true})
		pw.Close()
		done <- code
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), " on http://"); ok {
				host, _, _ := strings.Cut(rest, "/")
				ready <- "http://" + host
			}
		}
		close(ready)
	}()
	var base string
	select {
	case base = <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("pronto serve was not ready within 20 s")
	}
	if base == "" {
		cancel()
		t.Fatalf("pronto serve exited with %d before it was ready", <-done)
	}
	return base, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(20 * time.Second):
			t.Fatal("pronto serve did not stop")
			return -1
		}
	}
}

func TestServe(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	base, stop := startServe(t, map[string]string{EnvAPIKey: "k3y"}, "--addr", "127.0.0.1:0", "--database-url", db)
	get := func(path, key string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/ojs/v1/health", ""); code != 200 {
		t.Fatalf("health: %d", code)
	}
	if code := get("/ojs/manifest", ""); code != 401 {
		t.Fatalf("manifest without the key from $%s: %d", EnvAPIKey, code)
	}
	if code := get("/ojs/manifest", "k3y"); code != 200 {
		t.Fatalf("manifest with the key: %d", code)
	}
	if code := get("/ojs/v1/_test/reset", "k3y"); code != 404 {
		t.Fatalf("the reset endpoint without --test-mode: %d", code)
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
	// The schema it created is there for the other commands.
	run(t, "--database-url", db, "queues", "list").ok(t)
}

func TestServeRefusesUnsafeSetups(t *testing.T) {
	run(t, "serve", "--addr", "0.0.0.0:0", "--database-url", "memory:").fails(t, ExitUsage, "non-loopback")
	run(t, "serve", "--addr", ":0", "--database-url", "memory:").fails(t, ExitUsage, "non-loopback")
	run(t, "serve", "--addr", "nonsense", "--database-url", "memory:").fails(t, ExitUsage, "listen address")
	run(t, "serve", "--max-body-bytes", "0", "--database-url", "memory:").fails(t, ExitUsage, "--max-body-bytes")
	run(t, "serve", "extra").fails(t, ExitUsage, "unexpected argument")
	if r := run(t, "serve", "--help"); r.code != ExitOK || !strings.Contains(r.stdout, "--api-key") {
		t.Fatalf("help:\n%s", r)
	}
	// A port already taken is an operational error, not a usage error.
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", "memory:")
	host := strings.TrimPrefix(base, "http://")
	run(t, "serve", "--addr", host, "--database-url", "memory:").fails(t, ExitError, "cannot listen")
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
}

// TestServeMetricsAddrInUseStartsNothing: when --metrics-addr cannot be listened on, serve fails
// (exit 1) having started nothing: its API address does not answer once Run has returned.
func TestServeMetricsAddrInUseStartsNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := free.Addr().String()
	free.Close()
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	run(t, "serve", "--addr", apiAddr, "--metrics-addr", busy.Addr().String(), "--database-url", db).
		fails(t, ExitError, "cannot listen on "+busy.Addr().String())
	hc := &http.Client{Timeout: 2 * time.Second}
	if resp, err := hc.Get("http://" + apiAddr + "/ojs/v1/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("serve failed, yet its API on %s still answers %d", apiAddr, resp.StatusCode)
	}
}

// TestServeNotifyURL: --notify-url takes a Redis URL (the server starts and stops with it) and
// refuses anything else as a usage error naming the flag.
func TestServeNotifyURL(t *testing.T) {
	run(t, "serve", "--database-url", "memory:", "--notify-url", "postgres://localhost/db").fails(t, ExitUsage, "--notify-url")
	db := "sqlite:" + filepath.Join(t.TempDir(), "notify.db")
	_, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db,
		"--notify-url", "redis://127.0.0.1:6379/0?channel=prontotest:{serve-notify}")
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
}

// TestServeRemoveCompleted: with --remove-completed, a job acknowledged through the server is gone
// (404), while a job that fails for good is kept.
func TestServeRemoveCompleted(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db, "--remove-completed")
	defer stop()
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		code, out := serveCall(t, base, method, path, body)
		if code != want {
			t.Fatalf("%s %s: status %d, want %d: %v", method, path, code, want, out)
		}
		return out
	}
	fetchOne := func() string {
		t.Helper()
		out := call("POST", "/ojs/v1/workers/fetch", `{"queues":["rm"],"worker_id":"w1","count":1}`, 200)
		jobs, _ := out["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("fetch: %v", out)
		}
		return jobs[0].(map[string]any)["id"].(string)
	}
	ok := call("POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"rm"}}`, 201)["job"].(map[string]any)["id"].(string)
	if id := fetchOne(); id != ok {
		t.Fatalf("fetched %s, want %s", id, ok)
	}
	call("POST", "/ojs/v1/workers/ack", `{"job_id":"`+ok+`","result":{"sent":true}}`, 200)
	call("GET", "/ojs/v1/jobs/"+ok, "", 404)

	failed := call("POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"rm","retry":{"max_attempts":1}}}`, 201)["job"].(map[string]any)["id"].(string)
	if id := fetchOne(); id != failed {
		t.Fatalf("fetched %s, want %s", id, failed)
	}
	call("POST", "/ojs/v1/workers/nack", `{"job_id":"`+failed+`","error":{"type":"boom","message":"no"}}`, 200)
	job := call("GET", "/ojs/v1/jobs/"+failed, "", 200)["job"].(map[string]any)
	if job["state"] != "discarded" {
		t.Fatalf("the failed job: %v", job)
	}
}

// TestServeReplaysDeadLetter: pronto serve applies the dead-letter replay rules every
// --dead-letter-replay-interval, on its own (its client leads maintenance).
func TestServeReplaysDeadLetter(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db, "--dead-letter-replay-interval", "50ms")
	defer stop()
	code, out := serveCall(t, base, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"rp","retry":{"max_attempts":1}}}`)
	if code != 201 {
		t.Fatalf("enqueue: %d %v", code, out)
	}
	id := out["job"].(map[string]any)["id"].(string)
	if code, out := serveCall(t, base, "POST", "/ojs/v1/workers/fetch", `{"queues":["rp"],"worker_id":"w1"}`); code != 200 || len(out["jobs"].([]any)) != 1 {
		t.Fatalf("fetch: %d %v", code, out)
	}
	if code, out := serveCall(t, base, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","error":{"type":"Timeout","message":"slow"}}`); code != 200 {
		t.Fatalf("nack: %d %v", code, out)
	}
	if code, out := serveCall(t, base, "PUT", "/ojs/v1/dead-letter/replay-rules",
		`{"replay_rules":[{"name":"timeouts","filter":{"error_type":"Timeout"},"delay":"PT0S","max_replays":1}]}`); code != 200 {
		t.Fatalf("put rules: %d %v", code, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, out := serveCall(t, base, "GET", "/ojs/v1/admin/jobs?queue=rp&state=available", "")
		if jobs, _ := out["items"].([]any); len(jobs) == 1 {
			meta, _ := jobs[0].(map[string]any)["meta"].(map[string]any)
			if meta["retried_from"] != id || meta["ojs.replay_rule"] != "timeouts" {
				t.Fatalf("the replayed job: %v", jobs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pronto serve did not replay the dead-letter job")
		}
	}
}

// serveCall sends a JSON request to a running `pronto serve` at base and returns the status and the
// decoded JSON body (nil when it is none).
func serveCall(t *testing.T, base, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestServeDeadLetterArchive: --dead-letter-archive gives the server's client a file archive, so
// that a queue's retention may say pruning_policy archive (refused without one), and
// --dead-letter-pruning-policy is checked as a usage error naming the flag.
func TestServeDeadLetterArchive(t *testing.T) {
	run(t, "serve", "--database-url", "memory:", "--dead-letter-pruning-policy", "shred").fails(t, ExitUsage, "--dead-letter-pruning-policy")
	run(t, "serve", "--database-url", "memory:", "--dead-letter-pruning-policy", "archive").fails(t, ExitUsage, "--dead-letter-archive")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "serve", "--database-url", "memory:", "--dead-letter-archive", filepath.Join(file, "sub")).fails(t, ExitUsage, "--dead-letter-archive")

	const put = `{"queues":{"billing":{"max_count":100,"pruning_policy":"archive"}}}`
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", "memory:")
	if code, out := serveCall(t, base, "PUT", "/ojs/v1/dead-letter/retention", put); code != 400 {
		t.Fatalf("archive policy on a server without an archive: %d %v", code, out)
	}
	stop()
	dir := filepath.Join(t.TempDir(), "archive")
	base, stop = startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", "memory:",
		"--dead-letter-archive", dir, "--dead-letter-pruning-policy", "archive")
	defer stop()
	if code, out := serveCall(t, base, "PUT", "/ojs/v1/dead-letter/retention", put); code != 200 {
		t.Fatalf("archive policy with --dead-letter-archive: %d %v", code, out)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("the archive folder is created at start: %v", err)
	}
}

// TestServeLoopbackHosts: without an API key, serve answers only requests to a loopback Host, on
// the API and the dashboard alike (DNS rebinding), and --allowed-host adds names; with a key, the
// Host is free. --request-timeout must be positive.
func TestServeLoopbackHosts(t *testing.T) {
	run(t, "serve", "--request-timeout", "0s", "--database-url", "memory:").fails(t, ExitUsage, "--request-timeout")
	get := func(base, path, host string) int {
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer k3y")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", "memory:",
		"--allowed-host", "jobs.internal, proxy:8443", "--request-timeout", "2s")
	for _, path := range []string{"/ojs/v1/queues", "/"} {
		if got := get(base, path, "attacker.example:8080"); got != http.StatusForbidden {
			t.Errorf("GET %s with a rebound Host: %d", path, got)
		}
		for _, host := range []string{strings.TrimPrefix(base, "http://"), "localhost", "jobs.internal", "proxy:8443"} {
			if got := get(base, path, host); got != http.StatusOK {
				t.Errorf("GET %s with Host %s: %d", path, host, got)
			}
		}
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
	base, stop = startServe(t, map[string]string{EnvAPIKey: "k3y"}, "--addr", "127.0.0.1:0", "--database-url", "memory:")
	if got := get(base, "/ojs/v1/queues", "jobs.example.com"); got != http.StatusOK {
		t.Errorf("with an API key, any Host: %d", got)
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
}
