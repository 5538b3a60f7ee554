package cli

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/internal/pgbouncertest"
	"github.com/pronto-jobs/pronto/internal/testdb"
)

// TestDatabaseListenURL: with --database-url through PgBouncer (transaction pooling) and
// --database-listen-url direct, commands work; the flag is refused for other databases and for a
// URL that is not PostgreSQL's.
func TestDatabaseListenURL(t *testing.T) {
	t.Parallel()
	b := pgbouncertest.Start(t)
	// The CLI picks the query mode itself when a listen URL is given.
	pooled := strings.Replace(b.URL, "&default_query_exec_mode=cache_describe", "", 1)
	db := []string{"--database-url", pooled, "--database-listen-url", b.DirectURL, "--schema", testdb.Schema(t)}
	run(t, with(db, "migrate", "up")...).ok(t)
	id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
	for range 3 { // the same statements again, on whichever server connection PgBouncer picks
		if out := run(t, with(db, "jobs", "list")...).ok(t).stdout; !strings.Contains(out, id) {
			t.Fatalf("jobs list through PgBouncer lacks %s:\n%s", id, out)
		}
		run(t, with(db, "jobs", "get", id)...).ok(t)
	}
	res := runWith(t, runOpts{env: map[string]string{EnvDatabaseListenURL: b.DirectURL}},
		"queues", "list", "--database-url", pooled, "--schema", db[5])
	res.ok(t)

	run(t, "jobs", "list", "--database-url", "memory:", "--database-listen-url", b.DirectURL).
		fails(t, ExitUsage, "--database-listen-url applies to PostgreSQL only")
	run(t, with(db[:2], "jobs", "list", "--database-listen-url", "sqlite:x.db")...).
		fails(t, ExitUsage, "must be a postgres:// URL")
}
