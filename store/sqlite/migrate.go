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
	"sync"
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
	// olderOK says that binaries which do not know this migration may keep running on the schema it
	// produces (its up file's store.OlderBinariesLine).
	olderOK bool
}

// lastUnmarked is the newest migration released before migrations said whether older binaries may
// run on their schema. Every binary that reads the marks knows these migrations, so their marks are
// never consulted; every later migration must carry one.
const lastUnmarked = 14

// loadMigrations returns the embedded migrations, oldest first. They are read once: the schema
// watch of every started client asks for them every few seconds (NewerMigrations).
var loadMigrations = sync.OnceValues(readMigrations)

// readMigrations reads the embedded migrations, oldest first.
func readMigrations() ([]migration, error) {
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
		if m.olderOK, err = store.MigrationMark(m.version, m.name, m.up, lastUnmarked); err != nil {
			return nil, err
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

// markColumnSQL tells whether pronto_migrations has the older-binaries marks' column, which a file
// first migrated by a binary that predates the marks lacks; addMarkColumnSQL adds it (NULL on the
// rows recorded before).
const (
	markColumnSQL    = `SELECT count(*) FROM pragma_table_info('pronto_migrations') WHERE name = 'older_binaries_ok'`
	addMarkColumnSQL = `ALTER TABLE pronto_migrations ADD COLUMN older_binaries_ok INTEGER`
)

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
	var hasMark int
	if err := tx.QueryRowContext(ctx, markColumnSQL).Scan(&hasMark); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", s.path, err)
	}
	if hasMark == 0 {
		if _, err := tx.ExecContext(ctx, addMarkColumnSQL); err != nil {
			return nil, fmt.Errorf("migrate %s: %w", s.path, err)
		}
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
		if _, err := tx.ExecContext(ctx, `INSERT INTO pronto_migrations (version, name, applied_at, older_binaries_ok) VALUES (?, ?, ?, ?)`,
			m.version, m.name, nowUS, m.olderOK); err != nil {
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
// applied that this binary does not know and may not run with.
//
// Unknown migrations that a newer pronto applied and marked compatible with older binaries are
// accepted: this binary runs on their schema. One not so marked (incompatible, or applied by a
// binary that predates the marks) fails the check, and the error names it.
func (s *Store) CheckSchema(ctx context.Context) error {
	known, err := knownMigrations()
	if err != nil {
		return fmt.Errorf("migration status %s: %w", s.path, err)
	}
	applied, err := s.appliedAfter(ctx, 0)
	if err != nil {
		return fmt.Errorf("migration status %s: %w", s.path, err)
	}
	return store.CheckApplied("SQLite database "+s.path, known, applied)
}

// NewerMigrations lists the migrations applied to the database that this binary does not know (a
// newer pronto applied them), oldest first: those marked compatible with older binaries, and the
// others (marked incompatible, or recorded by a binary that predates the marks). It takes one
// statement: every started client's schema watch calls it every few seconds.
func (s *Store) NewerMigrations(ctx context.Context) (compatible, incompatible []store.Migration, err error) {
	ms, err := loadMigrations()
	if err != nil {
		return nil, nil, err
	}
	newer, err := s.appliedAfter(ctx, ms[len(ms)-1].version)
	if err != nil {
		return nil, nil, err
	}
	compatible, incompatible = store.SplitNewer(newer)
	return compatible, incompatible, nil
}

// IncompatibleMigrations lists the embedded migrations marked incompatible with older binaries
// (binaries that do not know them must not run on their schema), oldest first, applied or not.
func (s *Store) IncompatibleMigrations() ([]store.Migration, error) {
	known, err := knownMigrations()
	if err != nil {
		return nil, err
	}
	return store.IncompatibleOf(known, lastUnmarked), nil
}

// knownMigrations is the embedded migrations with their marks, for the checks shared with the
// PostgreSQL store.
func knownMigrations() ([]store.MarkedMigration, error) {
	ms, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	out := make([]store.MarkedMigration, len(ms))
	for i, m := range ms {
		out[i] = store.MarkedMigration{Migration: store.Migration{Version: m.version, Name: m.name}, OlderOK: m.olderOK}
	}
	return out, nil
}

// appliedAfter reads pronto_migrations: the migrations applied after version after (0 for all),
// oldest first, with the marks recorded beside them; none when there is no such table. It is one
// statement whatever the table: it selects every column and reads the mark only where the table has
// its column (a file first migrated by a binary that predates the marks lacks it: every row is then
// unmarked).
func (s *Store) appliedAfter(ctx context.Context, after int) ([]store.MarkedMigration, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT * FROM pronto_migrations WHERE version > ? ORDER BY version`, after)
	if err != nil {
		if strings.Contains(err.Error(), "no such table: pronto_migrations") {
			return nil, nil // never migrated
		}
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var (
		out  []store.MarkedMigration
		m    store.MarkedMigration
		at   int64
		mark sql.NullBool
	)
	dest := make([]any, len(cols))
	for i, c := range cols {
		switch c {
		case "version":
			dest[i] = &m.Version
		case "name":
			dest[i] = &m.Name
		case "applied_at":
			dest[i] = &at
		case "older_binaries_ok":
			dest[i] = &mark
		default:
			dest[i] = new(any)
		}
	}
	for rows.Next() {
		mark = sql.NullBool{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		m.Applied, m.AppliedAt, m.OlderOK = true, microTime(at), mark.Valid && mark.Bool
		out = append(out, m)
	}
	return out, rows.Err()
}

// migrationStatus returns every embedded migration with whether it is applied, and the applied
// versions that are not embedded (a newer binary's), in order.
func (s *Store) migrationStatus(ctx context.Context) ([]store.Migration, []int, error) {
	known, err := knownMigrations()
	if err != nil {
		return nil, nil, fmt.Errorf("migration status %s: %w", s.path, err)
	}
	applied, err := s.appliedAfter(ctx, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("migration status %s: %w", s.path, err)
	}
	status, unknown := store.AppliedStatus(known, applied)
	return status, unknown, nil
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
