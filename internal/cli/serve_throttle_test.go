package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeTenantThrottle: bad noisy-neighbour flags are usage errors naming the flag; with
// --tenant-throttle a flooding tenant is throttled by the server's leader, and the admin API shows
// and resets it.
func TestServeTenantThrottle(t *testing.T) {
	for flag, value := range map[string]string{
		"--tenant-noisy-interval":      "10ms",
		"--tenant-noisy-depth-ratio":   "-1",
		"--tenant-noisy-active-share":  "1.5",
		"--tenant-noisy-enqueue-ratio": "-2",
		"--tenant-noisy-error-ratio":   "-3",
		"--tenant-throttle-factor":     "1",
		"--tenant-throttle-for":        "0s",
	} {
		run(t, "serve", "--database-url", "memory:", flag, value).fails(t, ExitUsage, flag)
	}
	run(t, "serve", "--database-url", "memory:", "--tenant-noisy-interval", "0", "--tenant-throttle").fails(t, ExitUsage, "--tenant-throttle")

	db := "sqlite:" + filepath.Join(t.TempDir(), "throttle.db")
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db,
		"--tenant-noisy-interval", "100ms", "--tenant-throttle", "--tenant-throttle-for", "1h")
	do := func(method, path, body string) (int, map[string]any) {
		return serveCall(t, base, method, path, body)
	}
	if code, m := do("PUT", "/ojs/v1/admin/tenants/flood", `{"fairness_weight":5}`); code != 200 {
		t.Fatalf("put: %d %v", code, m)
	}
	var jobs []string
	for range 120 {
		jobs = append(jobs, `{"type":"t.job","args":[],"options":{"queue":"nq"},"meta":{"tenant_id":"flood"}}`)
	}
	for _, q := range []string{"qa", "qb"} {
		jobs = append(jobs, fmt.Sprintf(`{"type":"t.job","args":[],"options":{"queue":"nq"},"meta":{"tenant_id":%q}}`, q))
	}
	if code, m := do("POST", "/ojs/v1/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`); code != 201 {
		t.Fatalf("batch: %d %v", code, m)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, m := do("GET", "/ojs/v1/admin/tenants/flood/throttle", "")
		if code == 200 {
			if m["effective_weight"] != 1.0 || m["original_weight"] != 5.0 {
				t.Fatalf("throttle: %v", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flood was not throttled: %d %v", code, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The command line shows the throttle too, in the table and in --json.
	table := run(t, "tenants", "get", "flood", "--database-url", db).ok(t)
	if !strings.Contains(table.stdout, "(throttled: weight_reduced until ") {
		t.Fatalf("tenants get does not show the throttle:\n%s", table)
	}
	var got struct {
		Throttle *struct {
			EffectiveWeight int `json:"effective_weight"`
		} `json:"throttle"`
	}
	run(t, "tenants", "get", "flood", "--json", "--database-url", db).ok(t).decode(t, &got)
	if got.Throttle == nil || got.Throttle.EffectiveWeight != 1 {
		t.Fatalf("tenants get --json: throttle %+v", got.Throttle)
	}
	if code, m := do("DELETE", "/ojs/v1/admin/tenants/flood/throttle", ""); code != 200 || m["weight"] != 5.0 {
		t.Fatalf("reset: %d %v", code, m)
	}
	if code := stop(); code != ExitOK {
		t.Fatalf("serve exited with %d", code)
	}
}
