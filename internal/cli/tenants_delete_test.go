package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// freshSQLiteDB returns the flags of a fresh, migrated SQLite database.
func freshSQLiteDB(t *testing.T) []string {
	t.Helper()
	db := []string{"--database-url", "sqlite:" + filepath.Join(t.TempDir(), "pronto.db")}
	run(t, with(db, "migrate", "up")...).ok(t)
	return db
}

// TestTenantsDeleteForgetsEnqueueLimits: 'pronto tenants delete T' forgets the tenant's enqueue
// limits too (it is "unlimited ... again"), and a tenant whose only setting is an enqueue limit is
// found and cleared, not "not found" (exit 3).
func TestTenantsDeleteForgetsEnqueueLimits(t *testing.T) {
	db := freshSQLiteDB(t)
	run(t, with(db, "tenants", "set", "acme", "--max-queue-depth", "1", "--weight", "3")...).ok(t)
	run(t, with(db, "tenants", "delete", "acme")...).ok(t)
	run(t, with(db, "enqueue", "a.b", "--tenant", "acme")...).ok(t)
	if res := run(t, with(db, "enqueue", "a.b", "--tenant", "acme")...); res.code != ExitOK {
		t.Errorf("after 'tenants delete acme' (\"unlimited ... again\") the tenant's insert is still refused:\n%s", res)
	}

	// A tenant whose only setting is an enqueue limit: delete must forget it, not say "not found".
	run(t, with(db, "tenants", "set", "beta", "--max-scheduled", "1")...).ok(t)
	if res := run(t, with(db, "tenants", "delete", "beta")...); res.code != ExitOK {
		t.Errorf("'tenants delete' of a tenant with enqueue limits stored:\n%s", res)
	}
	res := run(t, with(db, "tenants", "get", "beta", "--json")...)
	if res.code == ExitOK && strings.Contains(res.stdout, "max_scheduled") {
		t.Errorf("enqueue limits survive 'tenants delete':\n%s", res)
	}
}

// TestRateLimitsDeleteInvalidKeyIsUsage: an argument no rate key can have is a usage error (exit 2)
// for 'rate-limits delete' as for 'rate-limits set', so a script can tell a typo from a key already
// removed (exit 3).
func TestRateLimitsDeleteInvalidKeyIsUsage(t *testing.T) {
	db := freshSQLiteDB(t)
	run(t, with(db, "rate-limits", "set", "bad key", "--max-active", "1")...).fails(t, ExitUsage, "rate key")
	run(t, with(db, "rate-limits", "delete", "bad key")...).fails(t, ExitUsage, "rate key")
}
