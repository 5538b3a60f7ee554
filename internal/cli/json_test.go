package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestListJSONShape: every list command prints {"<items>": [...], "next": CURSOR}.
func TestListJSONShape(t *testing.T) {
	db := []string{"--database-url", "sqlite:" + t.TempDir() + "/p.db"}
	run(t, with(db, "migrate", "up")...).ok(t)
	run(t, with(db, "enqueue", "a.b")...).ok(t)
	run(t, with(db, "enqueue", "a.b")...).ok(t)
	run(t, with(db, "rate-limits", "set", "k", "--max-active", "1")...).ok(t)
	run(t, with(db, "cron", "add", "nightly", "--kind", "report.build", "--schedule", "@daily")...).ok(t)
	for _, c := range []struct {
		args []string
		key  string
		n    int
		next bool
	}{
		{[]string{"jobs", "list", "--limit", "1"}, "jobs", 1, true},
		{[]string{"jobs", "list"}, "jobs", 2, false},
		{[]string{"queues", "list"}, "queues", 1, false},
		{[]string{"rate-limits", "list"}, "rate_limits", 1, false},
		{[]string{"cron", "list"}, "cron", 1, false},
	} {
		var out map[string]json.RawMessage
		run(t, with(db, append(c.args, "--json")...)...).ok(t).decode(t, &out)
		var items []json.RawMessage
		var next string
		if len(out) != 2 || json.Unmarshal(out[c.key], &items) != nil || json.Unmarshal(out["next"], &next) != nil {
			t.Fatalf("%v: want {%q: [...], \"next\": \"...\"}, got %v", c.args, c.key, out)
		}
		if len(items) != c.n || (next != "") != c.next {
			t.Errorf("%v: %d items, next %q", c.args, len(items), next)
		}
	}
}

// TestDurationsInJSONAreISO8601: every duration in --json output is an ISO 8601 duration, as OJS
// writes them: a job's timeout, a tenant's periods and a rate limit's period alike.
func TestDurationsInJSONAreISO8601(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "sqlite:" + t.TempDir() + "/p.db"}
	run(t, with(db, "migrate", "up")...).ok(t)
	run(t, with(db, "tenants", "set", "acme", "--rate", "10", "--period", "1s", "--enqueue-rate", "100", "--enqueue-period", "1m")...).ok(t)
	run(t, with(db, "rate-limits", "set", "k", "--rate", "5", "--period", "1m")...).ok(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"enqueue", "a.b", "--tenant", "acme", "--timeout", "90s"}, []string{`"timeout": "PT1M30S"`}},
		{[]string{"tenants", "get", "acme"}, []string{`"period": "PT1S"`, `"enqueue_period": "PT1M"`}},
		{[]string{"tenants", "list"}, []string{`"period": "PT1S"`, `"enqueue_period": "PT1M"`}},
		{[]string{"rate-limits", "list"}, []string{`"period": "PT1M"`}},
	} {
		out := run(t, with(db, append(c.args, "--json")...)...).ok(t).stdout
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v --json lacks %s:\n%s", c.args, w, out)
			}
		}
	}
}

// TestErrorsAsJSON: with --json, an error is a JSON object on standard error, with the exit code.
func TestErrorsAsJSON(t *testing.T) {
	db := []string{"--database-url", "memory:"}
	for _, c := range []struct {
		args []string
		code int
		name string
		want string
	}{
		{[]string{"jobs", "get", "0190d4b2-6c1e-7f3a-9b2c-4d5e6f708192", "--json"}, ExitNotFound, "not_found", "not found"},
		{[]string{"jobs", "list", "--json", "--queue", "Email"}, ExitUsage, "usage", `--queue "Email"`},
		{[]string{"jobs", "list", "--json", "--bogus"}, ExitUsage, "usage", "unknown flag --bogus"},
		{[]string{"nope", "--json"}, ExitUsage, "usage", `unknown command "nope"`},
	} {
		res := run(t, with(db, c.args...)...)
		if res.code != c.code || res.stdout != "" {
			t.Fatalf("want exit %d and no stdout:\n%s", c.code, res)
		}
		var out struct {
			Error errorJSON `json:"error"`
		}
		if err := json.Unmarshal([]byte(res.stderr), &out); err != nil {
			t.Fatalf("stderr is not JSON (%v):\n%s", err, res)
		}
		if out.Error.Code != c.name || out.Error.ExitCode != c.code || !strings.Contains(out.Error.Message, c.want) {
			t.Errorf("%v: %+v", c.args, out.Error)
		}
	}
	// Without --json, the same error is one line of text.
	run(t, with(db, "jobs", "get", "0190d4b2-6c1e-7f3a-9b2c-4d5e6f708192")...).fails(t, ExitNotFound, "not found")
}
