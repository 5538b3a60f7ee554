package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/internal/testdb"
)

// withParam adds a query parameter (a session setting: pgx sends unknown ones as runtime
// parameters) to a PostgreSQL URL.
func withParam(url, kv string) string {
	if strings.Contains(url, "?") {
		return url + "&" + kv
	}
	return url + "?" + kv
}

// A command meeting a migration's lock past lock_timeout, or migrating a read-only server, says
// what the database's condition is (busy on a lock another session holds; read-only, perhaps a
// demoted primary) rather than only the driver's SQLSTATE.
func TestCommandsNameBusyAndReadOnlyDatabase(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	run(t, "migrate", "up", "--database-url", testdb.URL(), "--schema", schema).ok(t)
	locker, err := testdb.NewPool(t, 1).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "LOCK TABLE "+schema+".schema_migrations IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	run(t, "queues", "list", "--database-url", withParam(testdb.URL(), "lock_timeout=100ms"), "--schema", schema).
		fails(t, ExitError, "database busy: lock timeout (a lock held by another session, such as a migration")
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// demo migrates through the same open as every command (migrate up reports its own errors).
	run(t, "demo", "--database-url", withParam(testdb.URL(), "default_transaction_read_only=on"), "--schema", testdb.Schema(t)).
		fails(t, ExitError, "database read-only: it takes no writes (a standby, or a primary demoted by a failover?)")
}
