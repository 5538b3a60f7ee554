package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestSchemaNewerErrorNamesSchemaAndCommand: an older binary on a schema migrated by a newer pronto
// says so once, names the PostgreSQL schema, and gives the command that rolls the newer migrations
// back with the flags the user gave.
func TestSchemaNewerErrorNamesSchemaAndCommand(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	db := []string{"--database-url", testdb.URL(), "--schema", schema}
	run(t, with(db, "migrate", "up")...).ok(t)
	_, err := testdb.Pool(t).Exec(context.Background(),
		fmt.Sprintf(`INSERT INTO %s.schema_migrations (version, name) VALUES (998, 'future'), (999, 'later')`, schema))
	require.NoError(t, err)

	for _, cmd := range [][]string{{"jobs", "list"}, {"migrate", "up"}, {"migrate", "status"}} {
		res := run(t, with(db, cmd...)...).fails(t, ExitError,
			fmt.Sprintf("the pronto schema of %s (schema %s) is newer than this binary: it has migration(s) 998, 999 applied", testdb.URL(), schema))
		require.Equal(t, 1, strings.Count(res.stderr, "newer than this binary"), res)
		require.Contains(t, res.stderr, fmt.Sprintf("pronto migrate down --steps 2 --database-url %s --schema %s", shellQuote(testdb.URL()), schema))
	}
}

// TestOlderBinaryRunsOnCompatibleNewerSchema: on a schema (PostgreSQL) or file (SQLite) that a
// newer pronto migrated with migrations it marked compatible with older binaries, this binary's
// commands run, and migrate status says what the newer pronto applied; a newer migration marked
// incompatible makes them refuse, naming every newer migration and the command that reverts them.
func TestOlderBinaryRunsOnCompatibleNewerSchema(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, db []string) {
		var record func(version int, name string, ok bool)
		switch {
		case schemaless(db):
			return // no schema
		case strings.HasPrefix(db[1], "postgres"):
			schema := db[3]
			// The column a newer pronto adds for its marks (a no-op where this binary added it).
			_, err := testdb.Pool(t).Exec(ctx, fmt.Sprintf(`ALTER TABLE %s.schema_migrations ADD COLUMN IF NOT EXISTS older_binaries_ok boolean`, schema))
			require.NoError(t, err)
			record = func(version int, name string, ok bool) {
				_, err := testdb.Pool(t).Exec(ctx, fmt.Sprintf(
					`INSERT INTO %s.schema_migrations (version, name, older_binaries_ok) VALUES ($1, $2, $3)`, schema), version, name, ok)
				require.NoError(t, err)
			}
		default:
			s, err := sqlite.Open(ctx, strings.TrimPrefix(db[1], "sqlite:"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			var has int
			require.NoError(t, s.DB().QueryRowContext(ctx,
				`SELECT count(*) FROM pragma_table_info('pronto_migrations') WHERE name = 'older_binaries_ok'`).Scan(&has))
			if has == 0 { // the column a newer pronto adds for its marks
				_, err = s.DB().ExecContext(ctx, `ALTER TABLE pronto_migrations ADD COLUMN older_binaries_ok INTEGER`)
				require.NoError(t, err)
			}
			record = func(version int, name string, ok bool) {
				_, err := s.DB().ExecContext(ctx,
					`INSERT INTO pronto_migrations (version, name, applied_at, older_binaries_ok) VALUES (?, ?, 0, ?)`, version, name, ok)
				require.NoError(t, err)
			}
		}
		record(998, "future", true)
		record(999, "later", true)
		run(t, with(db, "enqueue", "a.b")...).ok(t)
		run(t, with(db, "jobs", "list")...).ok(t)
		out := run(t, with(db, "migrate", "status")...).ok(t).stdout
		require.Contains(t, out, "is up to date")
		require.Contains(t, out, "it also has migration(s) 998_future, 999_later applied by a newer pronto, marked compatible with older binaries")
		require.Contains(t, run(t, with(db, "migrate", "up")...).ok(t).stdout, "998_future, 999_later")
		run(t, with(db, "migrate", "down", "--force")...).fails(t, ExitError, "newer than this binary")

		record(1000, "breaking", false)
		for _, cmd := range [][]string{{"jobs", "list"}, {"migrate", "up"}, {"migrate", "status"}} {
			res := run(t, with(db, cmd...)...).fails(t, ExitError, "is newer than this binary: it has migration(s) 998, 999, 1000 applied")
			require.Contains(t, res.stderr, "pronto migrate down --steps 3", res)
		}
	})
}
