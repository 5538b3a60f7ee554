package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SetUnlogged makes the jobs table UNLOGGED (on) or logged again (off), with the tables whose rows
// reference jobs (progress), in one transaction under the schema's migration lock.
//
// An UNLOGGED table writes no WAL for its rows, so every insert, claim and outcome costs less, but
// PostgreSQL empties it when it restarts after a crash (a killed server, a power cut, an immediate
// shutdown; not a clean stop), and streaming replicas do not have it. Every job, waiting or
// running, is lost then. Cron schedules, rate limits, queue settings and workflows' own rows stay
// logged. Use it only for jobs that can be lost, or that the application can enqueue again.
//
// Either way PostgreSQL rewrites the table under an ACCESS EXCLUSIVE lock: inserts and claims wait
// until it is done, for a time in proportion to the table's size. Run it on a quiet or small table.
// Turning it off writes the whole table to the WAL. Migrate keeps the setting: a migration that adds
// a table referencing jobs (PostgreSQL refuses a logged one that references an unlogged table) runs
// with the tables logged for its transaction, and they are made unlogged again, new ones included.
func (s *Store) SetUnlogged(ctx context.Context, on bool) error {
	return s.migrateTx(ctx, func(ctx context.Context, tx pgx.Tx, _ map[int]time.Time) error {
		return s.setPersistence(ctx, tx, on)
	})
}

// setPersistence makes the jobs table and the tables referencing it UNLOGGED (on) or logged, in tx.
func (s *Store) setPersistence(ctx context.Context, tx pgx.Tx, on bool) error {
	jobs := s.jobsTable.Sanitize()
	var refs []string
	rows, err := tx.Query(ctx, `SELECT DISTINCT conrelid::regclass::text FROM pg_constraint
WHERE contype = 'f' AND confrelid = $1::regclass AND conrelid <> confrelid`, jobs)
	if err != nil {
		return fmt.Errorf("tables referencing %s: %w", jobs, err)
	}
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error {
		refs = append(refs, name)
		return nil
	}); err != nil {
		return fmt.Errorf("tables referencing %s: %w", jobs, err)
	}
	// A logged table may not reference an unlogged one: the referencing tables change first on
	// the way to unlogged, last on the way back.
	order := append(refs, jobs)
	mode := "UNLOGGED"
	if !on {
		order = append([]string{jobs}, refs...)
		mode = "LOGGED"
	}
	for _, t := range order {
		// t is the catalog's own (quoted where needed) name, or jobsTable sanitized.
		if _, err := tx.Exec(ctx, "ALTER TABLE "+t+" SET "+mode); err != nil {
			return fmt.Errorf("make %s %s: %w", t, mode, err)
		}
	}
	return nil
}

// unloggedIn reports whether the jobs table exists and is UNLOGGED, read in tx.
func (s *Store) unloggedIn(ctx context.Context, tx pgx.Tx) (bool, error) {
	var u bool
	err := tx.QueryRow(ctx, `SELECT coalesce((SELECT relpersistence = 'u' FROM pg_class WHERE oid = to_regclass($1)), false)`,
		s.jobsTable.Sanitize()).Scan(&u)
	if err != nil {
		return false, fmt.Errorf("persistence of %s: %w", s.jobsTable.Sanitize(), err)
	}
	return u, nil
}

// Unlogged reports whether the jobs table is UNLOGGED (see SetUnlogged).
func (s *Store) Unlogged(ctx context.Context) (bool, error) {
	var u bool
	err := s.pool.QueryRow(ctx, `SELECT relpersistence = 'u' FROM pg_class WHERE oid = $1::regclass`,
		s.jobsTable.Sanitize()).Scan(&u)
	if err != nil {
		return false, fmt.Errorf("persistence of %s: %w", s.jobsTable.Sanitize(), err)
	}
	return u, nil
}
