package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.CronStore  = (*Store)(nil)
	_ store.CronPauser = (*Store)(nil)
)

// Cron schedules live in the pronto_cron table (migration 002). Times are unix microseconds, like the
// jobs table's.

const cronColumns = `name, id, expression, timezone, overlap_policy, template, description, enabled,
	created_at, next_run_at, last_run_at, run_count, last_job_id`

func scanCron(rs interface{ Scan(...any) error }) (*store.CronSchedule, error) {
	var (
		c             store.CronSchedule
		template      string
		enabled       int64
		created, next int64
		lastRun       sql.NullInt64
		lastJob       sql.NullString
	)
	if err := rs.Scan(&c.Name, &c.ID, &c.Expression, &c.Timezone, &c.OverlapPolicy, &template,
		&c.Description, &enabled, &created, &next, &lastRun, &c.RunCount, &lastJob); err != nil {
		return nil, err
	}
	c.Template = []byte(template)
	c.Enabled = enabled != 0
	c.CreatedAt = time.UnixMicro(created).UTC()
	c.NextRunAt = time.UnixMicro(next).UTC()
	if lastRun.Valid {
		c.LastRunAt = time.UnixMicro(lastRun.Int64).UTC()
	}
	c.LastJobID = lastJob.String
	return &c, nil
}

func cronMicro(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// CronCreate stores a new cron schedule; an existing name gives store.ErrDuplicate.
func (s *Store) CronCreate(ctx context.Context, c *store.CronSchedule) error {
	enabled := 0
	if c.Enabled {
		enabled = 1
	}
	var lastJob any
	if c.LastJobID != "" {
		lastJob = c.LastJobID
	}
	return s.insertNew(ctx, fmt.Sprintf("create cron schedule %q", c.Name), `INSERT INTO pronto_cron (`+cronColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		c.Name, c.ID, c.Expression, c.Timezone, c.OverlapPolicy, string(c.Template), c.Description, enabled,
		c.CreatedAt.UnixMicro(), c.NextRunAt.UnixMicro(), cronMicro(c.LastRunAt), c.RunCount, lastJob)
}

// CronGet returns one cron schedule, or store.ErrNotFound.
func (s *Store) CronGet(ctx context.Context, name string) (*store.CronSchedule, error) {
	c, err := scanCron(s.r.QueryRowContext(ctx, `SELECT `+cronColumns+` FROM pronto_cron WHERE name = ?`, name))
	if err != nil {
		return nil, s.rowError(fmt.Sprintf("cron schedule %q", name), err)
	}
	return c, nil
}

func (s *Store) queryCrons(ctx context.Context, query string, args ...any) ([]*store.CronSchedule, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.schemaHint(err)
	}
	defer rows.Close()
	var out []*store.CronSchedule
	for rows.Next() {
		c, err := scanCron(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CronList returns every cron schedule, by name.
func (s *Store) CronList(ctx context.Context) ([]*store.CronSchedule, error) {
	out, err := s.queryCrons(ctx, `SELECT `+cronColumns+` FROM pronto_cron ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list cron schedules: %w", err)
	}
	return out, nil
}

// CronDelete removes a cron schedule and returns it, or gives store.ErrNotFound.
func (s *Store) CronDelete(ctx context.Context, name string) (*store.CronSchedule, error) {
	c, err := scanCron(s.w.QueryRowContext(ctx, `DELETE FROM pronto_cron WHERE name = ? RETURNING `+cronColumns, name))
	if err != nil {
		return nil, s.rowError(fmt.Sprintf("delete cron schedule %q", name), err)
	}
	return c, nil
}

// CronSetEnabled pauses or resumes a cron schedule (store.CronPauser).
func (s *Store) CronSetEnabled(ctx context.Context, name string, enabled bool, next time.Time) (*store.CronSchedule, error) {
	on := 0
	if enabled {
		on = 1
	}
	var nextUS any // NULL: keep next_run_at
	if !next.IsZero() {
		nextUS = next.UnixMicro()
	}
	c, err := scanCron(s.w.QueryRowContext(ctx, `UPDATE pronto_cron SET enabled = ?, next_run_at = coalesce(?, next_run_at)
		WHERE name = ? RETURNING `+cronColumns, on, nextUS, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("cron schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("set cron schedule %q enabled: %w", name, s.schemaHint(err))
	}
	return c, nil
}

// CronDue returns up to limit enabled schedules due at now, earliest first.
func (s *Store) CronDue(ctx context.Context, now time.Time, limit int) ([]*store.CronSchedule, error) {
	if limit <= 0 {
		limit = 1000
	}
	out, err := s.queryCrons(ctx, `SELECT `+cronColumns+` FROM pronto_cron
		WHERE enabled = 1 AND next_run_at <= ? ORDER BY next_run_at, name LIMIT ?`, now.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("due cron schedules: %w", err)
	}
	return out, nil
}

// CronAdvance moves a schedule past its due occurrence if its guard holds.
func (s *Store) CronAdvance(ctx context.Context, a store.CronAdvance) (bool, error) {
	var (
		res sql.Result
		err error
	)
	if a.JobID != "" {
		res, err = s.w.ExecContext(ctx, `UPDATE pronto_cron
			SET next_run_at = ?, last_run_at = ?, last_job_id = ?, run_count = run_count + 1
			WHERE name = ? AND id = ? AND next_run_at = ?`,
			a.Next.UnixMicro(), cronMicro(a.RunAt), a.JobID, a.Name, a.ID, a.From.UnixMicro())
	} else {
		res, err = s.w.ExecContext(ctx, `UPDATE pronto_cron SET next_run_at = ?, last_run_at = ?
			WHERE name = ? AND id = ? AND next_run_at = ?`,
			a.Next.UnixMicro(), cronMicro(a.RunAt), a.Name, a.ID, a.From.UnixMicro())
	}
	if err != nil {
		return false, fmt.Errorf("advance cron schedule %q: %w", a.Name, s.schemaHint(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("advance cron schedule %q: %w", a.Name, err)
	}
	return n > 0, nil
}
