package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/internal/sqldrops"
	"github.com/pronto-jobs/pronto/store"
)

var _ store.DownPlanner = (*Store)(nil)

// leaseTable holds leader leases: not data anyone would miss, so rollbacks do not count it.
const leaseTable = "leader"

// clientsTable holds the records of live clients, rewritten every few seconds: not counted either.
const clientsTable = "clients"

// heldColumn marks the jobs a rate-limited claim took out of the claim index (migration 034): a
// hint the claims rebuild, so dropping it returns those jobs to the index and deletes nothing.
const heldColumn = "jobs.held"

// DownDataLoss counts, without changing anything, the rows MigrateDown(ctx, steps) would delete:
// those of every table the reverted migrations drop and, of the tables they keep, the rows with a
// value in a column they drop. What a migration drops is read from its down file (sqldrops).
func (s *Store) DownDataLoss(ctx context.Context, steps int) ([]store.DataLoss, error) {
	ms, _, err := s.migrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	cols, err := s.columns(ctx)
	if err != nil {
		return nil, fmt.Errorf("preview rollback of schema %s: %w", s.schema, err)
	}
	downs, applied := make([]string, len(migrations)), make([]bool, len(migrations))
	for i, m := range migrations {
		downs[i], applied[i] = m.down, ms[i].Applied
	}
	var out []store.DataLoss
	for _, d := range sqldrops.Plan(downs, applied, steps, cols, leaseTable, clientsTable, heldColumn) {
		l := store.DataLoss{Migration: ms[d.Migration], Table: d.Table, Column: d.Column}
		sql := "SELECT count(*) FROM " + pgx.Identifier{s.schema, l.Table}.Sanitize()
		if l.Column != "" {
			sql += " WHERE " + pgx.Identifier{l.Column}.Sanitize() + " IS NOT NULL"
		}
		if err := s.pool.QueryRow(ctx, sql).Scan(&l.Rows); err != nil {
			return nil, fmt.Errorf("preview rollback of schema %s: count %s: %w", s.schema, l.Table, err)
		}
		if l.Rows > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}

// columns returns the schema's tables, each with its columns and "" (the table itself).
func (s *Store) columns(ctx context.Context) (sqldrops.Columns, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = $1`, s.schema)
	if err != nil {
		return nil, err
	}
	out := sqldrops.Columns{}
	var table, column string
	_, err = pgx.ForEachRow(rows, []any{&table, &column}, func() error {
		out.Add(table, column)
		return nil
	})
	return out, err
}

// LiveLeases lists the leader leases that have not expired, by the database's clock.
func (s *Store) LiveLeases(ctx context.Context) ([]store.Lease, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, s.q.migrationsExist, s.schema+"."+leaseTable).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT name, leader_id, expires_at FROM `+pgx.Identifier{s.schema, leaseTable}.Sanitize()+
		` WHERE expires_at > now() ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("live leases of schema %s: %w", s.schema, err)
	}
	var (
		out []store.Lease
		l   store.Lease
		at  time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&l.Name, &l.LeaderID, &at}, func() error {
		l.ExpiresAt = at
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("live leases of schema %s: %w", s.schema, err)
	}
	return out, nil
}
