package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.CronStore = (*Store)(nil)

// Cron schedules live in the cron table of the store's schema (migration 004).

const cronCols = `name, id, expression, timezone, overlap_policy, template, description, enabled,
	created_at, next_run_at, last_run_at, run_count, last_job_id`

// cronSQL substitutes the store's quoted schema into a cron statement.
func (s *Store) cronSQL(q string) string {
	return strings.ReplaceAll(q, "{schema}", pgx.Identifier{s.schema}.Sanitize())
}

func scanCronRow(row pgx.Row) (*store.CronSchedule, error) {
	var (
		c        store.CronSchedule
		template []byte
		lastRun  *time.Time
		lastJob  *string
	)
	if err := row.Scan(&c.Name, &c.ID, &c.Expression, &c.Timezone, &c.OverlapPolicy, &template,
		&c.Description, &c.Enabled, &c.CreatedAt, &c.NextRunAt, &lastRun, &c.RunCount, &lastJob); err != nil {
		return nil, err
	}
	c.Template = template
	c.CreatedAt, c.NextRunAt = c.CreatedAt.UTC(), c.NextRunAt.UTC()
	if lastRun != nil {
		c.LastRunAt = lastRun.UTC()
	}
	if lastJob != nil {
		c.LastJobID = *lastJob
	}
	return &c, nil
}

func cronTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func cronText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CronCreate stores a new cron schedule; an existing name gives store.ErrDuplicate.
func (s *Store) CronCreate(ctx context.Context, c *store.CronSchedule) error {
	tag, err := s.pool.Exec(ctx, s.cronSQL(`INSERT INTO {schema}.cron (`+cronCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (name) DO NOTHING`),
		c.Name, c.ID, c.Expression, c.Timezone, c.OverlapPolicy, string(c.Template), c.Description,
		c.Enabled, c.CreatedAt, c.NextRunAt, cronTime(c.LastRunAt), c.RunCount, cronText(c.LastJobID))
	if err != nil {
		return fmt.Errorf("create cron schedule %q: %w", c.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("create cron schedule %q: %w", c.Name, store.ErrDuplicate)
	}
	return nil
}

// CronGet returns one cron schedule, or store.ErrNotFound.
func (s *Store) CronGet(ctx context.Context, name string) (*store.CronSchedule, error) {
	c, err := scanCronRow(s.pool.QueryRow(ctx, s.cronSQL(`SELECT `+cronCols+` FROM {schema}.cron WHERE name = $1`), name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("cron schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cron schedule %q: %w", name, err)
	}
	return c, nil
}

func (s *Store) queryCrons(ctx context.Context, q string, args ...any) ([]*store.CronSchedule, error) {
	rows, err := s.pool.Query(ctx, s.cronSQL(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.CronSchedule
	for rows.Next() {
		c, err := scanCronRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CronList returns every cron schedule, by name.
func (s *Store) CronList(ctx context.Context) ([]*store.CronSchedule, error) {
	out, err := s.queryCrons(ctx, `SELECT `+cronCols+` FROM {schema}.cron ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list cron schedules: %w", err)
	}
	return out, nil
}

// CronDelete removes a cron schedule and returns it, or gives store.ErrNotFound.
func (s *Store) CronDelete(ctx context.Context, name string) (*store.CronSchedule, error) {
	c, err := scanCronRow(s.pool.QueryRow(ctx, s.cronSQL(`DELETE FROM {schema}.cron WHERE name = $1 RETURNING `+cronCols), name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("delete cron schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("delete cron schedule %q: %w", name, err)
	}
	return c, nil
}

// CronDue returns up to limit enabled schedules due at now, earliest first.
func (s *Store) CronDue(ctx context.Context, now time.Time, limit int) ([]*store.CronSchedule, error) {
	if limit <= 0 {
		limit = 1000
	}
	out, err := s.queryCrons(ctx, `SELECT `+cronCols+` FROM {schema}.cron
		WHERE enabled AND next_run_at <= $1 ORDER BY next_run_at, name LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due cron schedules: %w", err)
	}
	return out, nil
}

// CronAdvance moves a schedule past its due occurrence if its guard holds.
func (s *Store) CronAdvance(ctx context.Context, a store.CronAdvance) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.cronSQL(`UPDATE {schema}.cron
		SET next_run_at = $1, last_run_at = $2,
			last_job_id = coalesce($3, last_job_id),
			run_count = run_count + CASE WHEN $3::text IS NULL THEN 0 ELSE 1 END
		WHERE name = $4 AND id = $5 AND next_run_at = $6`),
		a.Next, cronTime(a.RunAt), cronText(a.JobID), a.Name, a.ID, a.From)
	if err != nil {
		return false, fmt.Errorf("advance cron schedule %q: %w", a.Name, err)
	}
	return tag.RowsAffected() > 0, nil
}
