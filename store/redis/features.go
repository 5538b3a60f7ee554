package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// Rate limits: a key's limit and use live in the global hash <prefix>rl:<key> (fields set, max,
// rate, period (µs), onlimit, ws and wc (the open window's start and count), and n:<state>, the
// key's jobs per state), with <prefix>rs:<key> (its scheduled and retryable jobs by due time, for
// Waiting) and <prefix>rlkeys (the keys with a stored limit, for listing in key order). A limit
// spans queues, so the claim script of any queue reads and updates it: that is one script on a
// single Redis node, but crosses slots on a Redis Cluster, where jobs with a rate key are refused
// (store.ErrUnsupported).

// cluster reports whether the store runs on a Redis Cluster.
func (s *Store) cluster() bool {
	_, ok := s.rdb.(*goredis.ClusterClient)
	return ok
}

// validLimit checks a limit's fields: a zero field bounds nothing, so only negative fields and
// unknown actions are refused.
func validLimit(l store.RateLimit) error {
	if l.MaxActive < 0 || l.Rate < 0 || l.Period < 0 {
		return fmt.Errorf("rate limit %+v has a negative field: %w", l, store.ErrInvalidParams)
	}
	switch l.OnLimit {
	case "", store.LimitWait, store.LimitReschedule, store.LimitDrop:
		return nil
	}
	return fmt.Errorf("rate limit on-limit action %q (want wait, reschedule or drop): %w", l.OnLimit, store.ErrInvalidParams)
}

// encodeLimit is the form the scripts' setlimit reads: "max,rate,period_us,onlimit".
func encodeLimit(l store.RateLimit) string {
	return fmt.Sprintf("%d,%d,%d,%s", l.MaxActive, l.Rate, l.Period.Microseconds(), l.OnLimit)
}

func rateNotFound(key string) error {
	return fmt.Errorf("redis: rate limit %s: %w", key, store.ErrNotFound)
}

// SetRateLimit creates or replaces the limit under key and wakes the producers of every queue.
func (s *Store) SetRateLimit(ctx context.Context, key string, l store.RateLimit) error {
	if key == "" {
		return fmt.Errorf("redis: set rate limit: empty key: %w", store.ErrInvalidParams)
	}
	if err := validLimit(l); err != nil {
		return fmt.Errorf("redis: set rate limit %s: %w", key, err)
	}
	if s.cluster() {
		return fmt.Errorf("redis: set rate limit %s: rate limits on a Redis Cluster: %w", key, store.ErrUnsupported)
	}
	if err := scriptSetLimit.Run(ctx, s.rdb, []string{s.prefix, s.prefix}, key, encodeLimit(l)).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("redis: set rate limit %s: %w", key, err)
	}
	return s.wakeAll(ctx)
}

// wakeAll announces every queue: a changed limit may let any of them claim more.
func (s *Store) wakeAll(ctx context.Context) error {
	qs, err := s.queues(ctx)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	ns := make([]store.Notification, len(qs))
	for i, q := range qs {
		ns[i] = store.Notification{Kind: store.NotifyInsert, Queue: q, Nonce: nonce()}
	}
	return s.publish(ctx, ns)
}

// DeleteRateLimit removes the limit under key; its jobs become unlimited.
func (s *Store) DeleteRateLimit(ctx context.Context, key string) error {
	n, err := scriptDeleteLimit.Run(ctx, s.rdb, []string{s.prefix, s.prefix}, key).Int()
	if err != nil {
		return fmt.Errorf("redis: delete rate limit %s: %w", key, err)
	}
	if n == 0 {
		return rateNotFound(key)
	}
	return s.wakeAll(ctx)
}

// limitInfos reads the limits and use of keys, skipping keys without a stored limit.
func (s *Store) limitInfos(ctx context.Context, keys []string) ([]*store.RateLimitInfo, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	res, err := scriptLimitInfo.Run(ctx, s.rdb, []string{s.prefix, s.prefix}, toAny(keys)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: rate limits: %w", err)
	}
	var out []*store.RateLimitInfo
	for i, r := range res {
		f, _ := r.([]any)
		str := func(x int) string { v, _ := f[x].(string); return v }
		n := func(x int) int64 { v, _ := strconv.ParseInt(str(x), 10, 64); return v }
		if str(0) != "1" {
			continue
		}
		info := &store.RateLimitInfo{
			Key: keys[i],
			Limit: store.RateLimit{MaxActive: int(n(1)), Rate: int(n(2)), Period: time.Duration(n(3)) * time.Microsecond,
				OnLimit: store.LimitAction(str(4))},
			Active:  n(7),
			Waiting: n(8) + n(9),
		}
		if ws := n(5); ws > 0 {
			info.WindowStart, info.WindowCount = time.UnixMicro(ws).UTC(), n(6)
		}
		out = append(out, info)
	}
	return out, nil
}

// GetRateLimit returns the limit under key with its use, or ErrNotFound.
func (s *Store) GetRateLimit(ctx context.Context, key string) (*store.RateLimitInfo, error) {
	infos, err := s.limitInfos(ctx, []string{key})
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, rateNotFound(key)
	}
	return infos[0], nil
}

// ListRateLimits returns every stored limit with its use, in key order.
func (s *Store) ListRateLimits(ctx context.Context) ([]*store.RateLimitInfo, error) {
	keys, err := s.rdb.ZRange(ctx, s.prefix+"rlkeys", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: rate limits: %w", err)
	}
	return s.limitInfos(ctx, keys)
}

// InsertWorkflow is not implemented yet on Redis.
func (s *Store) InsertWorkflow(ctx context.Context, p store.WorkflowParams) (*store.Workflow, []*store.Job, error) {
	return nil, nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}

// GetWorkflow is not implemented yet on Redis.
func (s *Store) GetWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	return nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}

// CancelWorkflow is not implemented yet on Redis.
func (s *Store) CancelWorkflow(ctx context.Context, id string) (*store.Workflow, error) {
	return nil, fmt.Errorf("redis: workflows: %w", store.ErrUnsupported)
}
