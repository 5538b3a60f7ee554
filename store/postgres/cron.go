package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.CronStore  = (*Store)(nil)
	_ store.CronPauser = (*Store)(nil)
)

// CronCreate stores a new cron schedule as given; a schedule with the same name gives
// store.ErrDuplicate.
func (s *Store) CronCreate(ctx context.Context, c *store.CronSchedule) error {
	_, err := s.pool.Exec(ctx, s.q.cronCreate, c.Name, c.ID, c.Expression, c.Timezone, c.OverlapPolicy,
		string(c.Template), c.Description, c.Enabled, c.CreatedAt, c.NextRunAt,
		nullTime(c.LastRunAt), c.RunCount, nullText(c.LastJobID))
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("create cron schedule %q: %w", c.Name, store.ErrDuplicate)
		}
		return fmt.Errorf("create cron schedule %q: %w", c.Name, err)
	}
	return nil
}

// CronGet returns one cron schedule, or store.ErrNotFound.
func (s *Store) CronGet(ctx context.Context, name string) (*store.CronSchedule, error) {
	return scanOne(s.pool.QueryRow(ctx, s.q.cronGet, name), scanCron, fmt.Sprintf("cron schedule %q", name))
}

// CronList returns every cron schedule, by name.
func (s *Store) CronList(ctx context.Context) ([]*store.CronSchedule, error) {
	out, err := s.queryCrons(ctx, s.q.cronList)
	if err != nil {
		return nil, fmt.Errorf("list cron schedules: %w", err)
	}
	return out, nil
}

// CronDelete removes a cron schedule and returns it as it was, or gives store.ErrNotFound.
func (s *Store) CronDelete(ctx context.Context, name string) (*store.CronSchedule, error) {
	return scanOne(s.pool.QueryRow(ctx, s.q.cronDelete, name), scanCron, fmt.Sprintf("delete cron schedule %q", name))
}

// CronSetEnabled pauses or resumes a cron schedule (store.CronPauser). Its statement is kept here
// rather than among the prepared queries: it runs once per command.
func (s *Store) CronSetEnabled(ctx context.Context, name string, enabled bool, next time.Time) (*store.CronSchedule, error) {
	q := s.expand.Replace(`UPDATE {schema}.cron SET enabled = $2, next_run_at = coalesce($3, next_run_at)
WHERE name = $1 RETURNING ` + cronCols)
	return scanOne(s.pool.QueryRow(ctx, q, name, enabled, nullTime(next)), scanCron, fmt.Sprintf("cron schedule %q", name))
}

// CronDue returns up to limit enabled schedules whose next run is at or before now, earliest first
// (every one when limit is not positive).
func (s *Store) CronDue(ctx context.Context, now time.Time, limit int) ([]*store.CronSchedule, error) {
	var lim *int // NULL: LIMIT ALL
	if limit > 0 {
		lim = &limit
	}
	out, err := s.queryCrons(ctx, s.q.cronDue, now, lim)
	if err != nil {
		return nil, fmt.Errorf("due cron schedules: %w", err)
	}
	return out, nil
}

// CronAdvance moves a schedule past its due occurrence in one guarded UPDATE: it applies only while
// the schedule is registration a.ID still due at a.From, so two leaders cannot both advance it.
func (s *Store) CronAdvance(ctx context.Context, a store.CronAdvance) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q.cronAdvance, a.Name, a.ID, a.From, a.Next, nullTime(a.RunAt), nullText(a.JobID))
	if err != nil {
		return false, fmt.Errorf("advance cron schedule %q: %w", a.Name, err)
	}
	return tag.RowsAffected() == 1, nil
}

func (s *Store) queryCrons(ctx context.Context, sql string, args ...any) ([]*store.CronSchedule, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
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

// Cron schedules live in the cron table of the store's schema (migration 004); the statements are
// in queries.go.

// scanCron reads one row of cronCols.
func scanCron(row pgx.Row) (*store.CronSchedule, error) {
	var (
		c         store.CronSchedule
		template  string
		lastRunAt pgtype.Timestamptz
		lastJobID pgtype.Text
	)
	if err := row.Scan(&c.Name, &c.ID, &c.Expression, &c.Timezone, &c.OverlapPolicy, &template,
		&c.Description, &c.Enabled, &c.CreatedAt, &c.NextRunAt, &lastRunAt, &c.RunCount, &lastJobID); err != nil {
		return nil, err
	}
	if template != "" {
		c.Template = []byte(template)
	}
	// In UTC, as the other stores return them.
	c.CreatedAt, c.NextRunAt = c.CreatedAt.UTC(), c.NextRunAt.UTC()
	if lastRunAt.Valid {
		c.LastRunAt = lastRunAt.Time.UTC()
	}
	c.LastJobID = lastJobID.String
	return &c, nil
}

// StoreNow returns the database's current time. Cron judges its schedules by it, so that the
// processes sharing the database agree on which occurrences are due whatever their own clocks say.
func (s *Store) StoreNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, s.q.now).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}
