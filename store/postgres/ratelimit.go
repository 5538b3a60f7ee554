package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

var _ store.RateLimiter = (*Store)(nil)

// SetRateLimit creates or replaces the limit stored under key, keeping the key's current rate
// window, and announces every queue with claimable jobs under the key (the new limit may let more
// of them run). Claim enforces it from the next claim on, in every client.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	if key == "" {
		return fmt.Errorf("set rate limit: %w: the key is empty", store.ErrInvalidParams)
	}
	if err := validateRateLimit(l); err != nil {
		return fmt.Errorf("set rate limit %q: %w: %w", key, store.ErrInvalidParams, err)
	}
	if _, err := s.pool.Exec(ctx, s.q.setRateLimit, rateLimitArgs(key, l)...); err != nil {
		return fmt.Errorf("set rate limit %q: %w", key, err)
	}
	return nil
}

// GetRateLimit returns the limit under key with its current use, or an error matching
// store.ErrNotFound.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	return scanOne(s.pool.QueryRow(ctx, s.q.getRateLimit, key), scanRateLimit, fmt.Sprintf("rate limit %q", key))
}

// ListRateLimits returns every stored limit with its current use, in key order. It counts each
// key's jobs, so it is meant for dashboards and operators.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	rows, err := s.pool.Query(ctx, s.q.listRateLimits)
	if err != nil {
		return nil, fmt.Errorf("list rate limits: %w", err)
	}
	defer rows.Close()
	var out []*store.RateLimitInfo
	for rows.Next() {
		info, err := scanRateLimit(rows)
		if err != nil {
			return nil, fmt.Errorf("list rate limits: %w", err)
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rate limits: %w", err)
	}
	return out, nil
}

// DeleteRateLimit removes the limit under key, so its jobs are no longer limited, and announces
// the queues with claimable jobs under the key. A key without a limit gives an error matching
// store.ErrNotFound.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	var n int64
	if err := s.pool.QueryRow(ctx, s.q.deleteRateLimit, key).Scan(&n); err != nil {
		return fmt.Errorf("delete rate limit %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("delete rate limit %q: %w", key, store.ErrNotFound)
	}
	return nil
}

// validateRateLimit rejects negative bounds and an unknown OnLimit. A zero field bounds nothing, as
// the contract says; so does a Rate without a Period (one shorter than the microsecond the store
// keeps included), which the memory store accepts too.
func validateRateLimit(l store.RateLimit) error {
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return fmt.Errorf("rate limit %+v has a negative bound", l)
	}
	switch l.OnLimit {
	case "", store.LimitWait, store.LimitReschedule, store.LimitDrop:
		return nil
	}
	return fmt.Errorf("rate limit on-limit action %q is not wait, reschedule or drop", l.OnLimit)
}

// rateLimitArgs returns the parameters of sqlUpsertRateLimit and sqlSetRateLimit.
func rateLimitArgs(key string, l store.RateLimit) []any {
	onLimit := l.OnLimit
	if onLimit == "" {
		onLimit = store.LimitWait
	}
	return []any{key, l.MaxActive, l.Rate, l.Period.Microseconds(), string(onLimit)}
}

// scanRateLimit reads one row of rateLimitCols.
func scanRateLimit(row pgx.Row) (*store.RateLimitInfo, error) {
	var (
		info        store.RateLimitInfo
		periodUS    int64
		onLimit     string
		windowStart pgtype.Timestamptz
	)
	err := row.Scan(&info.Key, &info.Limit.MaxActive, &info.Limit.Rate, &periodUS, &onLimit,
		&windowStart, &info.WindowCount, &info.Active, &info.Waiting)
	if err != nil {
		return nil, err
	}
	info.Limit.Period = time.Duration(periodUS) * time.Microsecond
	info.Limit.OnLimit = store.LimitAction(onLimit)
	info.WindowStart = timeOf(windowStart)
	return &info, nil
}
