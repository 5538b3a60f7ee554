package cli

import (
	"strings"
	"testing"
)

// TestWebhooksCommands: 'webhooks add' registers a webhook (its secret from the environment, never
// printed), 'webhooks list' shows it, in a table and as JSON, and 'webhooks delete' removes it; bad
// input is a usage error and a missing webhook "not found". On every backend.
func TestWebhooksCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		res := run(t, with(db, "webhooks", "list")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "no webhooks") {
			t.Fatalf("empty list:\n%s", res)
		}
		add := runWith(t, runOpts{env: map[string]string{EnvWebhookSecret: "s3cret"}},
			with(db, "webhooks", "add", "https://hooks.example.com/p", "--types", "job.discarded, workflow.*", "--queues", "billing", "--max-attempts", "5")...).ok(t)
		id := strings.TrimSpace(add.stdout)
		if len(id) != 36 || add.stderr != "" {
			t.Fatalf("add:\n%s", add)
		}
		unsigned := run(t, with(db, "webhooks", "add", "http://127.0.0.1:9/x", "--disabled")...).ok(t)
		if !strings.Contains(unsigned.stderr, "is not signed") {
			t.Fatalf("an unsigned webhook without a warning:\n%s", unsigned)
		}

		out := run(t, with(db, "webhooks", "list")...).ok(t).stdout
		for _, want := range []string{id, "https://hooks.example.com/p", "job.discarded,workflow.*", "billing", "true"} {
			if !strings.Contains(out, want) {
				t.Fatalf("list lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "s3cret") {
			t.Fatalf("list shows the secret:\n%s", out)
		}
		var got struct {
			Webhooks []webhookJSON `json:"webhooks"`
		}
		run(t, with(db, "webhooks", "list", "--json")...).ok(t).decode(t, &got)
		if len(got.Webhooks) != 2 || got.Webhooks[0].ID != id || !got.Webhooks[0].HasSecret || got.Webhooks[0].MaxAttempts != 5 ||
			got.Webhooks[1].Enabled || got.Webhooks[1].HasSecret || len(got.Webhooks[1].Types) != 0 {
			t.Fatalf("list --json: %+v", got)
		}

		run(t, with(db, "webhooks", "add", "ftp://x")...).fails(t, ExitUsage, "webhooks add: url")
		run(t, with(db, "webhooks", "add", "https://x.example", "--max-attempts", "99")...).fails(t, ExitUsage, "max_attempts")
		run(t, with(db, "webhooks", "delete", "nope")...).fails(t, ExitUsage, "not a webhook id")
		run(t, with(db, "webhooks", "delete", id)...).ok(t)
		run(t, with(db, "webhooks", "delete", id)...).fails(t, ExitNotFound, "no webhook "+id)
	})
}
