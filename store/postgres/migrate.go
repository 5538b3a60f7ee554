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
}

// migrations lists the embedded migrations in version order. It panics on a malformed file name,
// which is a build defect caught by every test.
var migrations = loadMigrations()

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
			if _, err := tx.Exec(ctx, s.q.recordMigration, m.version, m.name); err != nil {
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

// CheckSchema returns a *store.SchemaError when the schema lacks an embedded migration or has one
// applied that this binary does not know. It reads the migrations table once.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, unknown, err := s.migrationStatus(ctx)
	if err != nil {
		return err
	}
	return store.CheckMigrations(fmt.Sprintf("PostgreSQL schema %q", s.schema), ms, unknown)
}

// migrationStatus returns every embedded migration with whether it is applied, and the applied
// versions that are not embedded (a newer binary's), in order.
func (s *Store) migrationStatus(ctx context.Context) ([]store.Migration, []int, error) {
	applied := map[int]time.Time{}
	var exists bool
	if err := s.pool.QueryRow(ctx, s.q.migrationsExist, s.schema+".schema_migrations").Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("migration status of schema %s: %w", s.schema, err)
	}
	if exists {
		var err error
		if applied, err = s.appliedMigrations(ctx, s.pool); err != nil {
			return nil, nil, fmt.Errorf("migration status of schema %s: %w", s.schema, err)
		}
	}
	out := make([]store.Migration, len(migrations))
	for i, m := range migrations {
		at, ok := applied[m.version]
		out[i] = store.Migration{Version: m.version, Name: m.name, Applied: ok, AppliedAt: at}
		delete(applied, m.version)
	}
	var unknown []int
	for v := range applied {
		unknown = append(unknown, v)
	}
	sort.Ints(unknown)
	return out, unknown, nil
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
