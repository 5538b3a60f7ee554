package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pronto-jobs/pronto/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var _ store.ReportingMigrator = (*Store)(nil)

// migration is one embedded migration: NNN_name.up.sql and NNN_name.down.sql. Migrations run with
// the search path set to the store's schema; {schema} and {channel} in their text are replaced by
// the quoted schema and the notification channel's literal, for function bodies, which must not
// depend on the search path of the sessions that call them.
type migration struct {
	version  int
	name     string
	up, down string
	// olderOK says that binaries which do not know this migration may keep running on the schema it
	// produces (its up file's store.OlderBinariesLine).
	olderOK bool
}

// lastUnmarked is the newest migration released before migrations said whether older binaries may
// run on their schema. Every binary that reads the marks knows these migrations, so their marks are
// never consulted; every later migration must carry one.
const lastUnmarked = 26

// migrations lists the embedded migrations in version order. It panics on a malformed file name,
// which is a build defect caught by every test.
var migrations = loadMigrations()

// known is migrations with their marks, for the checks shared with the SQLite store.
var known = func() []store.MarkedMigration {
	out := make([]store.MarkedMigration, len(migrations))
	for i, m := range migrations {
		out[i] = store.MarkedMigration{Migration: store.Migration{Version: m.version, Name: m.name}, OlderOK: m.olderOK}
	}
	return out
}()

func loadMigrations() []migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err)
	}
	byVersion := map[int]*migration{}
	for _, e := range entries {
		file := e.Name()
		var direction string
		switch {
		case strings.HasSuffix(file, ".up.sql"):
			direction = "up"
		case strings.HasSuffix(file, ".down.sql"):
			direction = "down"
		default:
			panic("postgres: unexpected migration file " + file)
		}
		base := strings.TrimSuffix(file, "."+direction+".sql")
		num, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			panic("postgres: migration file " + file + " is not NNN_name.(up|down).sql")
		}
		body, err := migrationFiles.ReadFile(path.Join("migrations", file))
		if err != nil {
			panic(err)
		}
		m := byVersion[version]
		if m == nil {
			m = &migration{version: version, name: name}
			byVersion[version] = m
		}
		if direction == "up" {
			m.up = string(body)
		} else {
			m.down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			panic(fmt.Sprintf("postgres: migration %d lacks its up or down file", m.version))
		}
		if m.olderOK, err = store.MigrationMark(m.version, m.name, m.up, lastUnmarked); err != nil {
			panic("postgres: " + err.Error())
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out
}

// Migrate creates the schema when missing and applies every pending migration, all in one
// transaction. Concurrent callers (several processes starting at once) are serialized by an
// advisory lock per schema: the first applies, the others find nothing left to do.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.ApplyMigrations(ctx)
	return err
}

// ApplyMigrations is Migrate, returning the migrations this call applied, oldest first (see
// store.ReportingMigrator): what it found applied once it held the lock is not its own work.
func (s *Store) ApplyMigrations(ctx context.Context) ([]store.Migration, error) {
	var done []store.Migration
	err := s.migrateTx(ctx, func(ctx context.Context, tx pgx.Tx, applied map[int]time.Time) error {
		var pending bool
		for _, m := range migrations {
			if _, ok := applied[m.version]; !ok {
				pending = true
			}
		}
		if !pending {
			return nil
		}
		// The time recorded with each migration (the column's default, the transaction's start).
		var at time.Time
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&at); err != nil {
			return err
		}
		// An unlogged jobs table (SetUnlogged) stays unlogged. PostgreSQL refuses a logged table that
		// references an unlogged one, so a migration that creates one fails on it (42P16): that
		// migration is tried again with the tables logged for the transaction, and they are made
		// unlogged again at the end, the new table with them. Other migrations leave the table alone
		// (each switch rewrites it whole under ACCESS EXCLUSIVE).
		unlogged, err := s.unloggedIn(ctx, tx)
		if err != nil {
			return err
		}
		switched := false
		for _, m := range migrations {
			if _, ok := applied[m.version]; ok {
				continue
			}
			relog := func() error {
				switched = true
				return s.setPersistence(ctx, tx, false)
			}
			if err := s.applyMigration(ctx, tx, m, unlogged && !switched, relog); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.expand.Replace(sqlRecordMarkedMigration), m.version, m.name, m.olderOK); err != nil {
				return fmt.Errorf("record migration %03d_%s: %w", m.version, m.name, err)
			}
			done = append(done, store.Migration{Version: m.version, Name: m.name, Applied: true, AppliedAt: at})
		}
		if switched {
			return s.setPersistence(ctx, tx, true)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// applyMigration runs m's up script in tx. With guard set (the jobs table is unlogged, and still
// so), it runs under a savepoint, and when PostgreSQL refuses it for a logged table referencing an
// unlogged one (42P16), relog makes the tables logged and it runs again.
func (s *Store) applyMigration(ctx context.Context, tx pgx.Tx, m migration, guard bool, relog func() error) error {
	script := s.expand.Replace(m.up)
	if guard {
		if _, err := tx.Exec(ctx, "SAVEPOINT pronto_migration"); err != nil {
			return fmt.Errorf("apply migration %03d_%s: %w", m.version, m.name, err)
		}
	}
	_, err := tx.Exec(ctx, script)
	var pe *pgconn.PgError
	if guard && errors.As(err, &pe) && pe.Code == "42P16" {
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT pronto_migration"); err != nil {
			return fmt.Errorf("apply migration %03d_%s: %w", m.version, m.name, err)
		}
		if err := relog(); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, script)
	}
	if err != nil {
		return fmt.Errorf("apply migration %03d_%s: %w", m.version, m.name, err)
	}
	return nil
}

// MigrateDown reverts the latest steps applied migrations, newest first, in one transaction.
// Reverting the first migration drops the jobs table and every job in it.
func (s *Store) MigrateDown(ctx context.Context, steps int) error {
	_, err := s.RevertMigrations(ctx, steps, nil)
	return err
}

// RevertMigrations is MigrateDown, calling check under the schema's migration lock with the
// migrations it is about to revert, and returning those it reverted (see store.ReportingMigrator).
func (s *Store) RevertMigrations(ctx context.Context, steps int,
	check func(ctx context.Context, revert []store.Migration) error) ([]store.Migration, error) {
	if steps <= 0 {
		return nil, nil
	}
	var (
		done     []store.Migration
		checkErr error
	)
	err := s.migrateTx(ctx, func(ctx context.Context, tx pgx.Tx, applied map[int]time.Time) error {
		known := make([]int, len(migrations))
		for i, m := range migrations {
			known[i] = m.version
		}
		if err := store.RefuseNewer(fmt.Sprintf("PostgreSQL schema %q", s.schema), known, applied); err != nil {
			return err
		}
		var revert []migration
		for i := len(migrations) - 1; i >= 0 && len(revert) < steps; i-- {
			if _, ok := applied[migrations[i].version]; ok {
				revert = append(revert, migrations[i])
			}
		}
		if len(revert) == 0 {
			return nil
		}
		plan := make([]store.Migration, len(revert))
		for i, m := range revert {
			plan[i] = store.Migration{Version: m.version, Name: m.name, Applied: true, AppliedAt: applied[m.version]}
		}
		if check != nil {
			if checkErr = check(ctx, plan); checkErr != nil {
				return checkErr
			}
		}
		for _, m := range revert {
			if _, err := tx.Exec(ctx, s.expand.Replace(m.down)); err != nil {
				return fmt.Errorf("revert migration %03d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, s.q.forgetMigration, m.version); err != nil {
				return fmt.Errorf("forget migration %03d_%s: %w", m.version, m.name, err)
			}
		}
		done = plan
		return nil
	})
	switch {
	case checkErr != nil:
		return nil, checkErr
	case err != nil:
		return nil, err
	}
	return done, nil
}

// MigrationStatus lists every embedded migration, oldest first, with whether and when it was
// applied to the store's schema.
func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	out, _, err := s.migrationStatus(ctx)
	return out, err
}

// migrationStatus returns every embedded migration with whether it is applied, and the applied
// versions that are not embedded (a newer binary's), in order.
func (s *Store) migrationStatus(ctx context.Context) ([]store.Migration, []int, error) {
	applied, err := s.appliedAfter(ctx, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("migration status of schema %s: %w", s.schema, err)
	}
	status, unknown := store.AppliedStatus(known, applied)
	return status, unknown, nil
}

// CheckSchema returns a *store.SchemaError when the schema lacks an embedded migration or has one
// applied that this binary does not know and may not run with.
//
// Unknown migrations that a newer pronto applied and marked compatible with older binaries are
// accepted: this binary runs on their schema. One not so marked (incompatible, or applied by a
// binary that predates the marks) fails the check, and the error names it.
func (s *Store) CheckSchema(ctx context.Context) error {
	applied, err := s.appliedAfter(ctx, 0)
	if err != nil {
		return fmt.Errorf("migration status of schema %s: %w", s.schema, err)
	}
	return store.CheckApplied(fmt.Sprintf("PostgreSQL schema %q", s.schema), known, applied)
}

// NewerMigrations lists the migrations applied to the schema that this binary does not know (a
// newer pronto applied them), oldest first: those marked compatible with older binaries, and the
// others (marked incompatible, or recorded by a binary that predates the marks). It takes one
// statement: every started client's schema watch calls it every few seconds.
func (s *Store) NewerMigrations(ctx context.Context) (compatible, incompatible []store.Migration, err error) {
	newer, err := s.appliedAfter(ctx, migrations[len(migrations)-1].version)
	if err != nil {
		return nil, nil, err
	}
	compatible, incompatible = store.SplitNewer(newer)
	return compatible, incompatible, nil
}

// IncompatibleMigrations lists the embedded migrations marked incompatible with older binaries
// (binaries that do not know them must not run on their schema), oldest first, applied or not.
func (s *Store) IncompatibleMigrations() ([]store.Migration, error) {
	return store.IncompatibleOf(known, lastUnmarked), nil
}

// appliedAfter reads the schema's migrations table: the migrations applied after version after (0
// for all), oldest first, with the marks recorded beside them; none when there is no such table.
// It is one statement whatever the table: the mark is read through the row's JSON, so that the
// table of a binary that predates the marks, which lacks their column, gives every row unmarked,
// and a missing table (or schema) is PostgreSQL's undefined_table.
func (s *Store) appliedAfter(ctx context.Context, after int) ([]store.MarkedMigration, error) {
	rows, err := s.pool.Query(ctx, s.expand.Replace(sqlAppliedMarked), after)
	if err != nil {
		return nil, noMigrationsTable(err)
	}
	var (
		out []store.MarkedMigration
		m   store.MarkedMigration
	)
	_, err = pgx.ForEachRow(rows, []any{&m.Version, &m.Name, &m.AppliedAt, &m.OlderOK}, func() error {
		m.Applied = true
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, noMigrationsTable(err)
	}
	return out, nil
}

// noMigrationsTable is nil for PostgreSQL's undefined_table (42P01), which a read of a schema
// never migrated meets, and err otherwise.
func noMigrationsTable(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return nil
	}
	return err
}

// migrateTx runs fn in a transaction holding the schema's migration lock, with the schema and its
// migrations table created and the search path set to the schema.
func (s *Store) migrateTx(ctx context.Context, fn func(context.Context, pgx.Tx, map[int]time.Time) error) (err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", s.schema, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{s.q.migrateLock, []any{migrationLockKey(s.schema)}},
		{s.q.createSchema, nil},
		{s.q.searchPath, nil},
		{s.q.createMigrations, nil},
	} {
		if _, err = tx.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			return fmt.Errorf("migrate schema %s: %w", s.schema, err)
		}
	}
	// The table of a schema first migrated by a binary that predates the marks lacks their column.
	var hasMark bool
	if err = tx.QueryRow(ctx, sqlHasMarkColumn, s.schema).Scan(&hasMark); err != nil {
		return fmt.Errorf("migrate schema %s: %w", s.schema, err)
	}
	if !hasMark {
		if _, err = tx.Exec(ctx, s.expand.Replace(sqlAddMarkColumn)); err != nil {
			return fmt.Errorf("migrate schema %s: %w", s.schema, err)
		}
	}
	applied, err := s.appliedMigrations(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", s.schema, err)
	}
	if err = fn(ctx, tx, applied); err != nil {
		return fmt.Errorf("migrate schema %s: %w", s.schema, err)
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate schema %s: commit: %w", s.schema, err)
	}
	return nil
}

// querier is what both a pool and a transaction offer.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Store) appliedMigrations(ctx context.Context, q querier) (map[int]time.Time, error) {
	rows, err := q.Query(ctx, s.q.appliedMigrations)
	if err != nil {
		return nil, err
	}
	applied := map[int]time.Time{}
	var (
		version int
		at      time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &at}, func() error {
		applied[version] = at
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// The statements of the older-binaries marks (the other migration statements are in queries.go).
const (
	// sqlHasMarkColumn tells whether the schema's migrations table has the marks' column.
	sqlHasMarkColumn = `SELECT EXISTS (SELECT FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'schema_migrations' AND column_name = 'older_binaries_ok')`
	// sqlAddMarkColumn adds it: NULL on the rows of the binaries that predate the marks.
	sqlAddMarkColumn = `ALTER TABLE {schema}.schema_migrations ADD COLUMN IF NOT EXISTS older_binaries_ok boolean`
	// sqlAppliedMarked lists the migrations applied after $1 with their marks. to_jsonb(m) reads the
	// mark whether or not the table has its column, so the statement is the same on both, and a
	// cached plan survives the column's addition (the result's type does not change).
	sqlAppliedMarked = `SELECT m.version, m.name, m.applied_at, coalesce((to_jsonb(m) ->> 'older_binaries_ok')::boolean, false)
		FROM {schema}.schema_migrations m WHERE m.version > $1 ORDER BY m.version`
	// sqlRecordMarkedMigration records an applied migration with its mark.
	sqlRecordMarkedMigration = `INSERT INTO {schema}.schema_migrations (version, name, older_binaries_ok) VALUES ($1, $2, $3)`
)
