package cli

import (
	"strings"
	"testing"
)

// TestTenants sets a tenant's weight and limit from the command line, lists and shows it with its
// job counts, and forgets it.
func TestTenants(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		run(t, with(db, "tenants", "list")...).ok(t)
		if res := run(t, with(db, "tenants", "set", "acme", "--weight", "3", "--max-active", "2")...).ok(t); res.stdout != "tenant acme: weight 3, limit stored\n" {
			t.Fatalf("set output:\n%s", res)
		}
		run(t, with(db, "enqueue", "report.build", "--tenant", "acme")...).ok(t)
		run(t, with(db, "enqueue", "report.build", "--tenant", "beta")...).ok(t)
		run(t, with(db, "enqueue", "report.build", "--tenant", "has space")...).fails(t, ExitUsage, "tenant")
		// jobs list --tenant: only that tenant's jobs.
		var list jobList
		run(t, with(db, "jobs", "list", "--tenant", "beta", "--json")...).ok(t).decode(t, &list)
		if len(list.Jobs) != 1 || list.Jobs[0].Tenant != "beta" {
			t.Fatalf("jobs list --tenant beta: %+v", list)
		}
		run(t, with(db, "jobs", "list", "--tenant", "has space")...).fails(t, ExitUsage, "--tenant")
		res := run(t, with(db, "tenants", "list")...).ok(t)
		if !strings.Contains(res.stdout, "acme") || !strings.Contains(res.stdout, "beta") || !strings.Contains(res.stdout, "1 (default)") {
			t.Fatalf("list:\n%s", res)
		}
		res = run(t, with(db, "tenants", "get", "acme", "--json")...).ok(t)
		for _, want := range []string{`"weight": 3`, `"max_active": 2`, `"available": 1`} {
			if !strings.Contains(res.stdout, want) {
				t.Fatalf("get --json lacks %s:\n%s", want, res)
			}
		}
		run(t, with(db, "tenants", "set", "acme", "--weight", "0")...).fails(t, ExitUsage, "--weight 0: must be 1 to 1000")
		run(t, with(db, "tenants", "set", "acme")...).fails(t, ExitUsage, "nothing to set")
		run(t, with(db, "tenants", "set", "acme", "--weight", "5000")...).fails(t, ExitUsage, "must be 1 to 1000")
		run(t, with(db, "tenants", "set", "acme", "--rate", "5")...).fails(t, ExitUsage, "go together")
		run(t, with(db, "tenants", "set", "acme", "--no-limit")...).ok(t)

		// A priority boost: added to the priority of the tenant's jobs enqueued from then on.
		if res := run(t, with(db, "tenants", "set", "boosted", "--priority-boost", "30")...).ok(t); res.stdout != "tenant boosted: priority boost +30\n" {
			t.Fatalf("set output:\n%s", res)
		}
		boostedID := strings.TrimSpace(run(t, with(db, "enqueue", "report.build", "--tenant", "boosted", "--priority", "80")...).ok(t).stdout)
		if j := getJob(t, db, boostedID); j.Priority != 100 {
			t.Fatalf("boosted job's priority %d, want 80+30 clamped to 100", j.Priority)
		}
		res = run(t, with(db, "tenants", "get", "boosted", "--json")...).ok(t)
		if !strings.Contains(res.stdout, `"priority_boost": 30`) {
			t.Fatalf("get --json lacks the boost:\n%s", res)
		}
		run(t, with(db, "tenants", "set", "boosted", "--priority-boost", "201")...).fails(t, ExitUsage, "--priority-boost")
		run(t, with(db, "tenants", "set", "boosted", "--priority-boost", "x")...).fails(t, ExitUsage, "--priority-boost")
		run(t, with(db, "tenants", "set", "boosted", "--priority-boost", "0")...).ok(t)
		run(t, with(db, "tenants", "delete", "boosted")...).fails(t, ExitNotFound, "no weight or limit")
		run(t, with(db, "tenants", "set", "boosted", "--priority-boost", "-5")...).ok(t)
		run(t, with(db, "tenants", "delete", "boosted")...).ok(t)

		// Enqueue limits: beyond them an enqueue fails, naming the limit.
		if res := run(t, with(db, "tenants", "set", "acme", "--max-queue-depth", "1", "--enqueue-rate", "100", "--enqueue-period", "1m")...).ok(t); res.stdout != "tenant acme: enqueue limits stored\n" {
			t.Fatalf("set output:\n%s", res)
		}
		run(t, with(db, "enqueue", "report.build", "--tenant", "acme")...).fails(t, 1, "max_queue_depth")
		res = run(t, with(db, "tenants", "get", "acme", "--json")...).ok(t)
		for _, want := range []string{`"max_queue_depth": 1`, `"enqueue_rate": 100`, `"enqueue_period": "PT1M"`} {
			if !strings.Contains(res.stdout, want) {
				t.Fatalf("get --json lacks %s:\n%s", want, res)
			}
		}
		run(t, with(db, "tenants", "set", "acme", "--enqueue-rate", "5")...).fails(t, ExitUsage, "go together")
		run(t, with(db, "tenants", "set", "acme", "--no-enqueue-limits", "--max-scheduled", "3")...).fails(t, ExitUsage, "contradict")
		run(t, with(db, "tenants", "set", "acme", "--no-enqueue-limits")...).ok(t)
		run(t, with(db, "enqueue", "report.build", "--tenant", "acme")...).ok(t)
		run(t, with(db, "tenants", "delete", "acme")...).ok(t)
		run(t, with(db, "tenants", "delete", "acme")...).fails(t, ExitNotFound, "no weight or limit")
		run(t, with(db, "tenants", "get", "nobody")...).fails(t, ExitNotFound, "nobody")
	})
}

// TestTenantNameChecked: every tenants command refuses a name no tenant can have as a usage error
// (exit 2), as 'jobs list --tenant' does, instead of looking it up and answering "not found".
func TestTenantNameChecked(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "memory:"}
	for _, bad := range []string{"has space", "nul\x00", strings.Repeat("t", 256)} {
		run(t, with(db, "jobs", "list", "--tenant", bad)...).fails(t, ExitUsage, "--tenant")
		run(t, with(db, "tenants", "set", bad, "--weight", "2")...).fails(t, ExitUsage, "tenants set: invalid tenant")
		run(t, with(db, "tenants", "get", bad)...).fails(t, ExitUsage, "tenants get: invalid tenant")
		run(t, with(db, "tenants", "delete", bad)...).fails(t, ExitUsage, "tenants delete: invalid tenant")
	}
}
