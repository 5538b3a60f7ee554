package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
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
