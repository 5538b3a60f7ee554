package cli

import (
	"strings"
	"testing"
)

// TestMigrateUnlogged: migrate up --unlogged makes PostgreSQL's jobs table UNLOGGED and says what that
// costs, status keeps saying it, jobs still work, and --logged makes it durable again; elsewhere the
// flags are refused by name.
func TestMigrateUnlogged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		run(t, with(db, "migrate", "up", "--unlogged", "--logged")...).fails(t, ExitUsage, "--unlogged and --logged exclude each other")
		if !strings.Contains(db[1], "postgres") {
			if strings.HasPrefix(db[1], "sqlite:") {
				run(t, with(db, "migrate", "up", "--unlogged")...).fails(t, ExitUsage, "--unlogged and --logged apply to PostgreSQL only")
			}
			return
		}
		up := run(t, with(db, "migrate", "up", "--unlogged")...).ok(t).stdout
		if !strings.Contains(up, "UNLOGGED: a database crash deletes every job") {
			t.Fatalf("migrate up --unlogged:\n%s", up)
		}
		if st := run(t, with(db, "migrate", "status")...).ok(t).stdout; !strings.Contains(st, "the jobs table is UNLOGGED") {
			t.Fatalf("status of an unlogged table:\n%s", st)
		}
		id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		getJob(t, db, id)
		if up := run(t, with(db, "migrate", "up", "--logged")...).ok(t).stdout; !strings.Contains(up, "the jobs table is logged") {
			t.Fatalf("migrate up --logged:\n%s", up)
		}
		if st := run(t, with(db, "migrate", "status")...).ok(t).stdout; strings.Contains(st, "UNLOGGED") {
			t.Fatalf("status of a logged table:\n%s", st)
		}
		getJob(t, db, id)
	})
}
