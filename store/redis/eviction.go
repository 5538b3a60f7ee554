package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is wrapped by the error of CheckEvictionPolicy for a server whose
// maxmemory-policy is not noeviction.
var ErrEvictionPolicy = errors.New("maxmemory-policy is not noeviction: a full Redis evicts keys, jobs among them")

// CheckEvictionPolicy reports a server (any master of a cluster) whose maxmemory-policy is not
// noeviction, in an error wrapping ErrEvictionPolicy that names the policy: once over maxmemory,
// any other policy drops keys (all of them for allkeys-*, those with a TTL, as the leader's lease,
// for volatile-*), so jobs vanish without a trace. It reads INFO memory; a server that refuses it
// (a managed Redis may) is not judged, and then an error without ErrEvictionPolicy says so. New
// runs it and logs a warning through Options.Logger when the policy evicts.
func (s *Store) CheckEvictionPolicy(ctx context.Context) error {
	check := func(ctx context.Context, c goredis.Cmdable) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("redis: read the maxmemory-policy: %w", err)
		}
		for line := range strings.Lines(info) {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok && p != "noeviction" {
				return fmt.Errorf("redis: %w (it is %s; set it to noeviction, see docs/redis.md)", ErrEvictionPolicy, p)
			}
		}
		return nil
	}
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return check(ctx, m) })
	}
	return check(ctx, s.rdb)
}
