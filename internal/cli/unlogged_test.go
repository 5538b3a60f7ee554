package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store/postgres"
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

// TestMigrateUpKeepsUnlogged: an operator with an UNLOGGED jobs table rolls back past 009_progress
// (migrate down --steps N --force, N reaching 009), then upgrades again. 009 creates the progress table with a
// foreign key to jobs, which PostgreSQL refuses for a logged table referencing an unlogged one; the
// roll forward used to fail on it whatever the flags (--logged ran Migrate before changing the
// table), stranding the schema. Migrate now runs with the tables logged for its transaction and
// makes them unlogged again, new ones included, and --logged and --unlogged both work after it.
func TestMigrateUpKeepsUnlogged(t *testing.T) {
	for _, flag := range []string{"", "--unlogged", "--logged"} {
		t.Run("up"+flag, func(t *testing.T) {
			schema := testdb.Schema(t)
			db := []string{"--database-url", testdb.URL(), "--schema", schema}
			run(t, with(db, "migrate", "up", "--unlogged")...).ok(t)
			id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
			steps := stepsThrough(t, schema, 9)
			down := run(t, with(db, "migrate", "down", "--steps", steps, "--force")...).ok(t).stdout
			if !strings.Contains(down, "rolled back 009_progress") {
				t.Fatalf("migrate down --steps %s did not reach 009:\n%s", steps, down)
			}
			args := with(db, "migrate", "up")
			if flag != "" {
				args = append(args, flag)
			}
			run(t, args...).ok(t)
			st := run(t, with(db, "migrate", "status")...).ok(t).stdout
			if unlogged := strings.Contains(st, "the jobs table is UNLOGGED"); unlogged != (flag != "--logged") {
				t.Fatalf("after migrate up %s, status:\n%s", flag, st)
			}
			if !strings.Contains(st, "up to date") {
				t.Fatalf("after migrate up %s, status:\n%s", flag, st)
			}
			getJob(t, db, id)
		})
	}
}

// stepsThrough is the --steps of a rollback of schema's migrations down to version (included): it
// grows with every migration added.
func stepsThrough(t *testing.T, schema string, version int) string {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.URL())
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgres.New(pool, postgres.Config{Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	ms, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	n := 0
	for _, m := range ms {
		if m.Applied && m.Version >= version {
			n++
		}
	}
	return strconv.Itoa(n)
}
