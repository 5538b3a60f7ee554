package cli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeMetrics: after a round trip over the API (enqueue, fetch, ack), /metrics (behind the API
// key) has the job's series with the right values.
func TestServeMetrics(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testServeMetrics(t, b.setup(t))
		})
	}
}

func testServeMetrics(t *testing.T, db []string) {
	args := append([]string{"--addr", "127.0.0.1:0", "--pprof"}, db...)
	base, stop := startServe(t, map[string]string{EnvAPIKey: "k3y"}, args...)
	defer stop()
	do := func(method, path, body string, key bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
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
	if code, _ := do("GET", "/metrics", "", false); code != 401 {
		t.Fatalf("/metrics without the key: %d", code)
	}
	if code, body := do("POST", "/ojs/v1/jobs", `{"type":"obs.test","args":[1],"options":{"queue":"obsq"}}`, true); code != 201 {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	code, body := do("POST", "/ojs/v1/workers/fetch", `{"queues":["obsq"],"worker_id":"w1"}`, true)
	if code != 200 {
		t.Fatalf("fetch: %d %s", code, body)
	}
	var fetched struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &fetched); err != nil || len(fetched.Jobs) != 1 {
		t.Fatalf("fetch answered %s (%v)", body, err)
	}
	if code, body := do("POST", "/ojs/v1/workers/ack", `{"job_id":"`+fetched.Jobs[0].ID+`","worker_id":"w1"}`, true); code != 200 {
		t.Fatalf("ack: %d %s", code, body)
	}
	want := []string{
		`ojs_job_enqueued_total{queue="obsq",type="obs.test"} 1`,
		`ojs_job_completed_total{queue="obsq",type="obs.test"} 1`,
		`ojs_queue_depth{queue="obsq",state="completed"} 1`,
		`pronto_job_claimed_total{queue="obsq",type="obs.test"} 1`,
		`pronto_job_pickup_latency_seconds_count{queue="obsq",type="obs.test"} 1`,
		`ojs_job_duration_seconds_count{queue="obsq",state="completed",type="obs.test"} 1`,
		`ojs_queue_depth{queue="obsq",state="available"} 0`,
		`go_goroutines `,
		`pronto_webhook_events_dropped_total 0`,
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := do("GET", "/metrics", "", true)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, "\n"+w) {
				missing = w
				break
			}
		}
		if code == 200 && missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics (%d) lacks %q:\n%s", code, missing, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := do("GET", "/debug/pprof/cmdline", "", true); code != 200 {
		t.Fatalf("pprof with --pprof: %d", code)
	}
	if code, _ := do("GET", "/debug/pprof/cmdline", "", false); code != 401 {
		t.Fatalf("pprof without the key: %d", code)
	}
}

// TestServeMetricsAddr: --metrics-addr serves /metrics apart from the API, behind the same key, and
// pprof stays off without --pprof.
func TestServeMetricsAddr(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	// A port free a moment ago: the serve output names only the API's address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	base, stop := startServe(t, map[string]string{EnvAPIKey: "k3y"}, "--addr", "127.0.0.1:0", "--database-url", db,
		"--metrics-addr", metricsAddr)
	defer stop()
	get := func(url string) int {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer k3y")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(base + "/metrics"); code != 404 {
		t.Fatalf("/metrics on the API address with --metrics-addr: %d", code)
	}
	if code := get("http://" + metricsAddr + "/metrics"); code != 200 {
		t.Fatalf("/metrics on --metrics-addr: %d", code)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("/metrics on --metrics-addr without the key: %d", resp.StatusCode)
	}
	if code := get(base + "/debug/pprof/cmdline"); code != 404 {
		t.Fatalf("pprof without --pprof: %d", code)
	}
}

// TestServeMetricsPriorityLabels: --metrics-priority-labels adds ojs_queue_available_by_priority
// for the queues' available jobs; without it /metrics has no such series.
func TestServeMetricsPriorityLabels(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		args := []string{"--addr", "127.0.0.1:0", "--database-url", "sqlite:" + filepath.Join(t.TempDir(), "serve.db")}
		if on {
			args = append(args, "--metrics-priority-labels")
		}
		base, stop := startServe(t, nil, args...)
		for _, body := range []string{
			`{"type":"obs.test","args":[],"options":{"queue":"prq","priority":7}}`,
			`{"type":"obs.test","args":[],"options":{"queue":"prq","priority":7}}`,
			`{"type":"obs.test","args":[],"options":{"queue":"prq"}}`,
		} {
			resp, err := http.Post(base+"/ojs/v1/jobs", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 201 {
				t.Fatalf("enqueue: %d", resp.StatusCode)
			}
		}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics := string(b)
		for _, want := range []string{
			"\n" + `ojs_queue_available_by_priority{priority="7",queue="prq"} 2`,
			"\n" + `ojs_queue_available_by_priority{priority="0",queue="prq"} 1`,
		} {
			if strings.Contains(metrics, want) != on {
				t.Fatalf("--metrics-priority-labels %v: /metrics has %q: %v\n%s", on, want, !on, metrics)
			}
		}
		if !on && strings.Contains(metrics, "ojs_queue_available_by_priority") {
			t.Fatalf("a per-priority series without --metrics-priority-labels:\n%s", metrics)
		}
		stop()
	}
}
