package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.CronStore  = (*Store)(nil)
	_ store.CronPauser = (*Store)(nil)
)

// Cron keys: see the scripts' comment in scripts.go.
func (s *Store) cronKey(name string) string { return s.prefix + "{cron}:s:" + name }
func (s *Store) cronDue() string            { return s.prefix + "{cron}:due" }
func (s *Store) cronNames() string          { return s.prefix + "{cron}:names" }

func (s *Store) cronKeys(name string) []string {
	return []string{s.cronKey(name), s.cronDue(), s.cronNames()}
}

func boolFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// CronCreate stores a new schedule; a schedule with the same name gives ErrDuplicate.
func (s *Store) CronCreate(ctx context.Context, c *store.CronSchedule) error {
	next := micros(c.NextRunAt)
	args := []any{c.Name, boolFlag(c.Enabled), next,
		"name", c.Name, "id", c.ID, "expr", c.Expression, "tz", c.Timezone, "overlap", c.OverlapPolicy,
		"template", string(c.Template), "desc", c.Description, "enabled", boolFlag(c.Enabled),
		"next", next, "last", micros(c.LastRunAt), "runs", strconv.FormatInt(c.RunCount, 10), "lastjob", c.LastJobID}
	n, err := scriptCronCreate.Run(ctx, s.rdb, s.cronKeys(c.Name), args...).Int()
	if err != nil {
		return fmt.Errorf("redis: create cron schedule %q: %w", c.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: create cron schedule %q: %w", c.Name, store.ErrDuplicate)
	}
	return nil
}

func decodeCron(m map[string]string) *store.CronSchedule {
	if m["name"] == "" {
		return nil
	}
	runs, _ := strconv.ParseInt(m["runs"], 10, 64)
	return &store.CronSchedule{
		Name: m["name"], ID: m["id"], Expression: m["expr"], Timezone: m["tz"], OverlapPolicy: m["overlap"],
		Template: json.RawMessage(m["template"]), Description: m["desc"], Enabled: m["enabled"] == "1",
		CreatedAt: fromMicros(m["created"]), NextRunAt: fromMicros(m["next"]), LastRunAt: fromMicros(m["last"]),
		RunCount: runs, LastJobID: m["lastjob"],
	}
}

// CronGet returns one schedule, or ErrNotFound.
func (s *Store) CronGet(ctx context.Context, name string) (*store.CronSchedule, error) {
	m, err := s.rdb.HGetAll(ctx, s.cronKey(name)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: cron schedule %q: %w", name, err)
	}
	c := decodeCron(m)
	if c == nil {
		return nil, fmt.Errorf("redis: cron schedule %q: %w", name, store.ErrNotFound)
	}
	return c, nil
}

// cronRead reads the named schedules, pipelined, skipping any deleted meanwhile.
func (s *Store) cronRead(ctx context.Context, names []string) ([]*store.CronSchedule, error) {
	cmds := make([]*goredis.MapStringStringCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = pl.HGetAll(ctx, s.cronKey(n))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: cron schedules: %w", err)
	}
	out := make([]*store.CronSchedule, 0, len(names))
	for _, c := range cmds {
		if cs := decodeCron(c.Val()); cs != nil {
			out = append(out, cs)
		}
	}
	return out, nil
}

// CronList returns every schedule, by name.
func (s *Store) CronList(ctx context.Context) ([]*store.CronSchedule, error) {
	names, err := s.rdb.SMembers(ctx, s.cronNames()).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: cron schedules: %w", err)
	}
	out, err := s.cronRead(ctx, names)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *store.CronSchedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CronDelete removes a schedule and returns it as it was, or gives ErrNotFound.
func (s *Store) CronDelete(ctx context.Context, name string) (*store.CronSchedule, error) {
	res, err := scriptCronDelete.Run(ctx, s.rdb, s.cronKeys(name), name).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: delete cron schedule %q: %w", name, err)
	}
	m, err := flatToMap(res)
	if err != nil {
		return nil, err
	}
	c := decodeCron(m)
	if c == nil {
		return nil, fmt.Errorf("redis: delete cron schedule %q: %w", name, store.ErrNotFound)
	}
	return c, nil
}

// CronDue returns up to limit enabled schedules whose NextRunAt is at or before now, earliest first.
func (s *Store) CronDue(ctx context.Context, now time.Time, limit int) ([]*store.CronSchedule, error) {
	by := &goredis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMicro(), 10)}
	if limit > 0 {
		by.Count = int64(limit)
	}
	names, err := s.rdb.ZRangeByScore(ctx, s.cronDue(), by).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: due cron schedules: %w", err)
	}
	out, err := s.cronRead(ctx, names)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b *store.CronSchedule) int {
		if r := a.NextRunAt.Compare(b.NextRunAt); r != 0 {
			return r
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// CronAdvance applies a, reporting false (and changing nothing) when its guard does not hold.
func (s *Store) CronAdvance(ctx context.Context, a store.CronAdvance) (bool, error) {
	n, err := scriptCronAdvance.Run(ctx, s.rdb, s.cronKeys(a.Name),
		a.Name, a.ID, micros(a.From), micros(a.Next), micros(a.RunAt), a.JobID).Int()
	if err != nil {
		return false, fmt.Errorf("redis: advance cron schedule %q: %w", a.Name, err)
	}
	return n == 1, nil
}

// CronSetEnabled pauses or resumes a cron schedule (store.CronPauser): a paused schedule leaves the
// due set, so CronDue never returns it; a resumed one rejoins it at its next run (next, when not
// zero).
func (s *Store) CronSetEnabled(ctx context.Context, name string, enabled bool, next time.Time) (*store.CronSchedule, error) {
	nextArg := ""
	if !next.IsZero() {
		nextArg = micros(next)
	}
	res, err := scriptCronSetEnabled.Run(ctx, s.rdb, s.cronKeys(name), name, boolFlag(enabled), nextArg).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: set cron schedule %q enabled: %w", name, err)
	}
	m, err := flatToMap(res)
	if err != nil {
		return nil, err
	}
	c := decodeCron(m)
	if c == nil {
		return nil, fmt.Errorf("redis: cron schedule %q: %w", name, store.ErrNotFound)
	}
	return c, nil
}

// StoreNow returns the Redis server's current time (TIME), the clock its scripts judge leases and
// due times by. Cron judges its schedules by it, so that the processes sharing the server agree on
// which occurrences are due whatever their own clocks say.
func (s *Store) StoreNow(ctx context.Context) (time.Time, error) {
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: read the server's clock: %w", err)
	}
	return now, nil
}
