package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestMigrateUpRefusesIncompatibleWhileClientsLive: a release whose pending migration is marked
// incompatible with older binaries does not apply it while a client (of the older release) holds a
// leader lease on the schema, naming the migration and the client; --force applies it, and with no
// live client it is applied as any other. Not parallel: it plays such a release by replacing
// pendingIncompatible, which the parallel tests read.
func TestMigrateUpRefusesIncompatibleWhileClientsLive(t *testing.T) {
	saved := pendingIncompatible
	t.Cleanup(func() { pendingIncompatible = saved })
	pendingIncompatible = func(db *database, ms []store.Migration) ([]store.Migration, error) {
		if last := ms[len(ms)-1]; !last.Applied {
			return []store.Migration{last}, nil
		}
		return nil, nil
	}
	ctx := context.Background()
	for _, b := range []struct {
		name string
		open func(t *testing.T) ([]string, store.Store)
	}{
		{"sqlite", func(t *testing.T) ([]string, store.Store) {
			path := filepath.Join(t.TempDir(), "pronto.db")
			s, err := sqlite.Open(ctx, path)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return []string{"--database-url", "sqlite:" + path}, s
		}},
		{"postgres", func(t *testing.T) ([]string, store.Store) {
			schema := testdb.Schema(t)
			s, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return []string{"--database-url", testdb.URL(), "--schema", schema}, s
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			db, s := b.open(t)
			run(t, with(db, "migrate", "up")...).ok(t)
			run(t, with(db, "migrate", "down")...).ok(t)
			status, err := s.(store.Migrator).MigrationStatus(ctx)
			require.NoError(t, err)
			last := status[len(status)-1]
			name := fmt.Sprintf("%03d_%s", last.Version, last.Name)

			// A client of the older release, as the lease it renews shows it.
			ok, err := s.Elect(ctx, "maintenance", "old-one", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			res := run(t, with(db, "migrate", "up")...).fails(t, ExitError, "refusing to migrate")
			require.Contains(t, res.stderr, "marked incompatible with older binaries, while clients use the schema: client old-one (leader of maintenance)")
			require.Contains(t, res.stderr, name)
			require.Contains(t, run(t, with(db, "migrate", "status")...).ok(t).stdout, "1 of ", "nothing was applied")

			out := run(t, with(db, "migrate", "up", "--force")...).ok(t).stdout
			require.Contains(t, out, "with --force: applying")
			require.Contains(t, out, "applied "+name)
			require.Contains(t, out, "is up to date")

			// With no live client, the same migration is applied without a word.
			run(t, with(db, "migrate", "down", "--force")...).ok(t)
			require.NoError(t, s.Resign(ctx, "maintenance", "old-one"))
			out = run(t, with(db, "migrate", "up")...).ok(t).stdout
			require.NotContains(t, out, "incompatible")
			require.Contains(t, out, "is up to date")
		})
	}
}
