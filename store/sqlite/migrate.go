package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var _ store.ReportingMigrator = (*Store)(nil)

// migration is one embedded migration: NNN_name.up.sql and NNN_name.down.sql.
type migration struct {
	version int
	name    string
	up      string
	down    string
}

// loadMigrations reads the embedded migrations, oldest first.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
	for _, e := range entries {
		file := e.Name()
		base, dir, ok := strings.Cut(strings.TrimSuffix(file, ".sql"), ".")
		if !ok || (dir != "up" && dir != "down") {
			return nil, fmt.Errorf("migration file %s: want NNN_name.up.sql or NNN_name.down.sql", file)
		}
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: bad version: %w", file, err)
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", file))
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &migration{version: v, name: name}
			byVersion[v] = m
		}
		if dir == "up" {
			m.up = string(b)
		} else {
			m.down = string(b)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migration %d (%s): needs both an up and a down file", m.version, m.name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

const migrationsTableSQL = `CREATE TABLE IF NOT EXISTS pronto_migrations (
	version    INTEGER NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT`

// appliedVersions reads the applied migrations within q.
func appliedVersions(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[int]time.Time, error) {
	rows, err := q.QueryContext(ctx, `SELECT version, applied_at FROM pronto_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at int64
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		out[v] = microTime(at)
	}
	return out, rows.Err()
}

// Migrate applies every pending migration, all in one write transaction, recording each in the
// pronto_migrations table. Concurrent Migrate calls, from any process, serialize on SQLite's write
// lock, and the second finds nothing to do.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.ApplyMigrations(ctx)
	return err
}

// ApplyMigrations is Migrate, returning the migrations this call applied, oldest first (see
// store.ReportingMigrator): what it found applied once it held the write lock is not its own work.
func (s *Store) ApplyMigrations(ctx context.Context) ([]store.Migration, error) {
	ms, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.path, err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.path, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, migrationsTableSQL); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.path, err)
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.path, err)
	}
	nowUS, now := s.nowMicro()
	var done []store.Migration
	for _, m := range ms {
		if _, ok := applied[m.version]; ok {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.up); err != nil {
			return nil, fmt.Errorf("migrate %s: migration %d (%s): %w", s.path, m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO pronto_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, nowUS); err != nil {
			return nil, fmt.Errorf("migrate %s: record migration %d: %w", s.path, m.version, err)
		}
		done = append(done, store.Migration{Version: m.version, Name: m.name, Applied: true, AppliedAt: now})
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate %s: commit: %w", s.path, err)
	}
	return done, nil
}

// MigrateDown reverts the latest steps applied migrations, newest first, in one write transaction.
// Reverting the first migration drops pronto's tables and every job in them.
func (s *Store) MigrateDown(ctx context.Context, steps int) error {
	_, err := s.RevertMigrations(ctx, steps, nil)
	return err
}

// RevertMigrations is MigrateDown, calling check under the write lock with the migrations it is
// about to revert, and returning those it reverted (see store.ReportingMigrator). check reads
// through the store's readers, which see what is committed: with the write lock held, that is the
// state being reverted.
func (s *Store) RevertMigrations(ctx context.Context, steps int,
	check func(ctx context.Context, revert []store.Migration) error) ([]store.Migration, error) {
	if steps <= 0 {
		return nil, nil
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("migrate down %s: %w", s.path, err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate down %s: %w", s.path, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, migrationsTableSQL); err != nil {
		return nil, fmt.Errorf("migrate down %s: %w", s.path, err)
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("migrate down %s: %w", s.path, err)
	}
	known := make([]int, len(ms))
	for i, m := range ms {
		known[i] = m.version
	}
	if err := store.RefuseNewer("SQLite database "+s.path, known, applied); err != nil {
		return nil, fmt.Errorf("migrate down: %w", err)
	}
	var revert []migration
	for i := len(ms) - 1; i >= 0 && len(revert) < steps; i-- {
		if _, ok := applied[ms[i].version]; ok {
			revert = append(revert, ms[i])
		}
	}
	if len(revert) == 0 {
		return nil, nil
	}
	plan := make([]store.Migration, len(revert))
	for i, m := range revert {
		plan[i] = store.Migration{Version: m.version, Name: m.name, Applied: true, AppliedAt: applied[m.version]}
	}
	if check != nil {
		if err := check(ctx, plan); err != nil {
			return nil, err
		}
	}
	for _, m := range revert {
		if _, err := tx.ExecContext(ctx, m.down); err != nil {
			return nil, fmt.Errorf("migrate down %s: migration %d (%s): %w", s.path, m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM pronto_migrations WHERE version = ?`, m.version); err != nil {
			return nil, fmt.Errorf("migrate down %s: unrecord migration %d: %w", s.path, m.version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate down %s: commit: %w", s.path, err)
	}
	// Statements prepared against the old schema are stale now.
	s.resetStmts()
	return plan, nil
}

// MigrationStatus lists every embedded migration, oldest first, with whether and when it was applied.
func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	out, _, err := s.migrationStatus(ctx)
	return out, err
}

// CheckSchema returns a *store.SchemaError when the database lacks an embedded migration or has one
// applied that this binary does not know.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, unknown, err := s.migrationStatus(ctx)
	if err != nil {
		return err
	}
	return store.CheckMigrations("SQLite database "+s.path, ms, unknown)
}

// migrationStatus returns every embedded migration with whether it is applied, and the applied
// versions that are not embedded (a newer binary's), in order.
func (s *Store) migrationStatus(ctx context.Context) ([]store.Migration, []int, error) {
	ms, err := loadMigrations()
	if err != nil {
		return nil, nil, fmt.Errorf("migration status %s: %w", s.path, err)
	}
	var exists int
	if err := s.r.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'pronto_migrations'`).Scan(&exists); err != nil {
		return nil, nil, fmt.Errorf("migration status %s: %w", s.path, err)
	}
	applied := map[int]time.Time{}
	if exists > 0 {
		if applied, err = appliedVersions(ctx, s.r); err != nil {
			return nil, nil, fmt.Errorf("migration status %s: %w", s.path, err)
		}
	}
	out := make([]store.Migration, len(ms))
	for i, m := range ms {
		at, ok := applied[m.version]
		out[i] = store.Migration{Version: m.version, Name: m.name, Applied: ok}
		if ok {
			out[i].AppliedAt = at
		}
		delete(applied, m.version)
	}
	var unknown []int
	for v := range applied {
		unknown = append(unknown, v)
	}
	slices.Sort(unknown)
	return out, unknown, nil
}

// resetStmts closes the prepared statements, to be prepared again on next use.
func (s *Store) resetStmts() {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	for _, stmts := range []map[string]*sql.Stmt{s.stmts, s.rstmts} {
		for q, st := range stmts {
			_ = st.Close()
			delete(stmts, q)
		}
	}
}
