package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/pronto-jobs/pronto/internal/sqldrops"
	"github.com/pronto-jobs/pronto/store"
)

var _ store.DownPlanner = (*Store)(nil)

// leaseTable holds leader leases: not data anyone would miss, so rollbacks do not count it.
const leaseTable = "pronto_leaders"

// DownDataLoss counts, without changing anything, the rows MigrateDown(ctx, steps) would delete:
// those of every table the reverted migrations drop and, of the tables they keep, the rows with a
// value in a column they drop. What a migration drops is read from its down file (sqldrops).
func (s *Store) DownDataLoss(ctx context.Context, steps int) ([]store.DataLoss, error) {
	ms, _, err := s.migrationStatus(ctx)
	if err != nil {
		return nil, err
	}
	known, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	cols, err := s.columns(ctx)
	if err != nil {
		return nil, fmt.Errorf("preview rollback of %s: %w", s.path, err)
	}
	downs, applied := make([]string, len(known)), make([]bool, len(known))
	for i, m := range known {
		downs[i], applied[i] = m.down, ms[i].Applied
	}
	var out []store.DataLoss
	for _, d := range sqldrops.Plan(downs, applied, steps, cols, leaseTable) {
		l := store.DataLoss{Migration: ms[d.Migration], Table: d.Table, Column: d.Column}
		// The names come from our own migration files and the catalog, never from input.
		q := "SELECT count(*) FROM " + quoteIdent(l.Table)
		if l.Column != "" {
			q += " WHERE " + quoteIdent(l.Column) + " IS NOT NULL"
		}
		if err := s.r.QueryRowContext(ctx, q).Scan(&l.Rows); err != nil {
			return nil, fmt.Errorf("preview rollback of %s: count %s: %w", s.path, l.Table, err)
		}
		if l.Rows > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}

// columns returns the database's tables, each with its columns and "" (the table itself).
func (s *Store) columns(ctx context.Context) (sqldrops.Columns, error) {
	rows, err := s.r.QueryContext(ctx,
		`SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p WHERE m.type = 'table'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := sqldrops.Columns{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			return nil, err
		}
		out.Add(strings.ToLower(table), strings.ToLower(column))
	}
	return out, rows.Err()
}

// LiveLeases lists the leader leases that have not expired, by this process's clock.
func (s *Store) LiveLeases(ctx context.Context) ([]store.Lease, error) {
	var exists int
	if err := s.r.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, leaseTable).Scan(&exists); err != nil || exists == 0 {
		return nil, err
	}
	nowUS, _ := s.nowMicro()
	rows, err := s.r.QueryContext(ctx,
		`SELECT name, leader_id, expires_at FROM `+leaseTable+` WHERE expires_at > ? ORDER BY name`, nowUS)
	if err != nil {
		return nil, fmt.Errorf("live leases of %s: %w", s.path, err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var (
			l  store.Lease
			us int64
		)
		if err := rows.Scan(&l.Name, &l.LeaderID, &us); err != nil {
			return nil, fmt.Errorf("live leases of %s: %w", s.path, err)
		}
		l.ExpiresAt = microTime(us)
		out = append(out, l)
	}
	return out, rows.Err()
}

// quoteIdent quotes an SQLite identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
