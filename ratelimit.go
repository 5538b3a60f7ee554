package pronto

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// RateLimit bounds the jobs that share a rate key, across every client and process: at most MaxActive
// of them running at once, and at most Rate of them started per Period. A zero field bounds nothing.
// The store enforces it when it hands jobs to workers, so a held-back job never occupies a worker
// slot; OnLimit says what happens to it (wait, the default; reschedule; or drop).
type RateLimit = store.RateLimit

// RateLimitInfo is a stored limit and its current use: active jobs, the current window's starts, and
// the jobs waiting for room.
type RateLimitInfo = store.RateLimitInfo

// LimitAction is what happens to a job its rate limit holds back.
type LimitAction = store.LimitAction

// The OJS on_limit actions.
const (
	// LimitWait leaves the job available; it runs as soon as the limit has room. The default.
	LimitWait = store.LimitWait
	// LimitReschedule moves the job to scheduled, due when the current window ends.
	LimitReschedule = store.LimitReschedule
	// LimitDrop discards the job (error type "rate_limited").
	LimitDrop = store.LimitDrop
)

// validLimitKey reports whether a limit may be stored under key: a valid rate key, or the
// TenantLimitKey of a valid tenant (whose ids allow more characters than rate keys).
func validLimitKey(key string) bool {
	if ValidRateKey(key) {
		return true
	}
	tenant, ok := strings.CutPrefix(key, TenantLimitKey(""))
	return ok && ValidTenant(tenant)
}

// validateRateLimit checks a limit before it is stored.
func validateRateLimit(key string, l *RateLimit) error {
	if !validLimitKey(key) {
		return invalidf("rate key %q: must match [a-zA-Z0-9][a-zA-Z0-9._:-]* (at most 255 characters)", key)
	}
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return invalidf("rate limit %q: MaxActive, Rate and Period must not be negative", key)
	}
	if (l.Rate > 0) != (l.Period > 0) {
		return invalidf("rate limit %q: Rate and Period go together (both set or both zero)", key)
	}
	if l.MaxActive == 0 && l.Rate == 0 {
		return invalidf("rate limit %q: sets no bound (give MaxActive, or Rate and Period)", key)
	}
	// Every store keeps these in 32 bits (PostgreSQL integers) and the period in whole microseconds.
	if l.MaxActive > math.MaxInt32 || l.Rate > math.MaxInt32 {
		return invalidf("rate limit %q: MaxActive and Rate must be at most %d", key, math.MaxInt32)
	}
	if l.Period > 0 && l.Period < time.Millisecond {
		return invalidf("rate limit %q: Period must be at least 1ms", key)
	}
	switch l.OnLimit {
	case "", LimitWait, LimitReschedule, LimitDrop:
	default:
		return invalidf("rate limit %q: on_limit %q must be wait, reschedule or drop", key, l.OnLimit)
	}
	return nil
}

// RateLimitSet stores the limit of key (replacing any), for every client of the store. Jobs inserted
// with that RateKey, before or after, are held to it from their next claim.
func (c *Client) RateLimitSet(ctx context.Context, key string, l RateLimit) error {
	if err := validateRateLimit(key, &l); err != nil {
		return err
	}
	if err := c.store.SetRateLimit(ctx, key, l); err != nil {
		return wrapOp(fmt.Sprintf("set rate limit %q", key), err)
	}
	return nil
}

// RateLimitGet returns the limit stored under key with its current use, or ErrNotFound.
func (c *Client) RateLimitGet(ctx context.Context, key string) (*RateLimitInfo, error) {
	info, err := c.store.GetRateLimit(ctx, key)
	if err != nil {
		return nil, wrapOp(fmt.Sprintf("rate limit %q", key), err)
	}
	return info, nil
}

// RateLimitList returns every stored limit with its use, in key order.
func (c *Client) RateLimitList(ctx context.Context) ([]*RateLimitInfo, error) {
	infos, err := c.store.ListRateLimits(ctx)
	if err != nil {
		return nil, wrapOp("list rate limits", err)
	}
	return infos, nil
}

// RateLimitDelete removes the limit stored under key: its jobs run unlimited. ErrNotFound if none.
func (c *Client) RateLimitDelete(ctx context.Context, key string) error {
	if err := c.store.DeleteRateLimit(ctx, key); err != nil {
		return wrapOp(fmt.Sprintf("delete rate limit %q", key), err)
	}
	return nil
}
