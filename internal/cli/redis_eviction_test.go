package cli

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/internal/redistest"
)

// A Redis that evicts keys when full would drop jobs without a trace: every command says so on
// stderr and still does its work; a Redis that does not evict gets no warning.
func TestRedisEvictingPolicyWarns(t *testing.T) {
	evicting := redistest.StartServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	url := "redis://" + evicting.Addr() + "/0"
	res := run(t, "migrate", "up", "--database-url", url).ok(t)
	if !strings.Contains(res.stderr, "pronto: warning:") || !strings.Contains(res.stderr, "allkeys-lru") || !strings.Contains(res.stderr, "noeviction") {
		t.Fatalf("expected a warning naming the policy and noeviction:\n%s", res)
	}
	res = run(t, "enqueue", "--database-url", url, "--queue", "q", "email", "--args", `{}`).ok(t)
	if !strings.Contains(res.stderr, "allkeys-lru") {
		t.Fatalf("expected the warning on every command:\n%s", res)
	}

	safe := redistest.StartServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "noeviction")
	res = run(t, "migrate", "up", "--database-url", "redis://"+safe.Addr()+"/0").ok(t)
	if res.stderr != "" {
		t.Fatalf("expected no warning for noeviction:\n%s", res)
	}
}
