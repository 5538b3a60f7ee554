package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// The OJS worker records (store.WorkerStore) live in one global hash, <prefix>workers, mapping a
// worker id to its record in JSON (workerRecord): one key, so every script names one slot.

var _ store.WorkerStore = (*Store)(nil)

func (s *Store) workersKey() string { return s.prefix + "workers" }

// workerRecord is a worker's record as stored: times in microseconds (strings, as the scripts write
// them), queues a JSON array in a string.
type workerRecord struct {
	Queues      string `json:"q"`
	First       string `json:"first"`
	Last        string `json:"last"`
	Directive   string `json:"d"`
	DirectiveAt string `json:"dat"`
}

// scriptTouchWorker (KEYS: the workers hash; ARGV: id, queues JSON or "") creates or updates a
// record's last-seen time (the server's clock) and queues, and returns its directive.
var scriptTouchWorker = newFunc("TouchWorker", `
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local r
if raw then r = cjson.decode(raw) else r = {q = '[]', first = now, d = '', dat = ''} end
r.last = now
if ARGV[2] ~= '' then r.q = ARGV[2] end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
return r.d
`)

// scriptWorkerDirective (KEYS: the workers hash; ARGV: id, directive) sets a record's directive;
// returns 0 without a record.
var scriptWorkerDirective = newFunc("WorkerDirective", `
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local r = cjson.decode(raw)
r.d = ARGV[2]
r.dat = ''
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  r.dat = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
return 1
`)

// TouchWorker records that worker id was heard from now.
func (s *Store) TouchWorker(ctx context.Context, id string, queues []string) (string, error) {
	qs := ""
	if len(queues) > 0 {
		b, err := json.Marshal(queues)
		if err != nil {
			return "", fmt.Errorf("redis: touch worker %s: %w", id, err)
		}
		qs = string(b)
	}
	d, err := scriptTouchWorker.Run(ctx, s.rdb, []string{s.workersKey()}, id, qs).Text()
	if err != nil {
		return "", fmt.Errorf("redis: touch worker %s: %w", id, err)
	}
	return d, nil
}

func decodeWorker(id, raw string) (*store.Worker, error) {
	var r workerRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("redis: worker %s: %w", id, err)
	}
	w := &store.Worker{ID: id, FirstSeenAt: fromMicros(r.First), LastSeenAt: fromMicros(r.Last), Directive: r.Directive}
	if r.DirectiveAt != "" {
		w.DirectiveAt = fromMicros(r.DirectiveAt)
	}
	if err := json.Unmarshal([]byte(r.Queues), &w.Queues); err != nil {
		return nil, fmt.Errorf("redis: worker %s: queues: %w", id, err)
	}
	if w.Queues == nil {
		w.Queues = []string{}
	}
	return w, nil
}

// ListWorkers returns every record, by id.
func (s *Store) ListWorkers(ctx context.Context) ([]store.Worker, error) {
	m, err := s.rdb.HGetAll(ctx, s.workersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: list workers: %w", err)
	}
	out := make([]store.Worker, 0, len(m))
	for id, raw := range m {
		w, err := decodeWorker(id, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetWorker returns one record, or store.ErrNotFound.
func (s *Store) GetWorker(ctx context.Context, id string) (*store.Worker, error) {
	raw, err := s.rdb.HGet(ctx, s.workersKey(), id).Result()
	if err == goredis.Nil {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redis: get worker %s: %w", id, err)
	}
	return decodeWorker(id, raw)
}

// SetWorkerDirective sets a worker's directive.
func (s *Store) SetWorkerDirective(ctx context.Context, id, directive string) error {
	n, err := scriptWorkerDirective.Run(ctx, s.rdb, []string{s.workersKey()}, id, directive).Int()
	if err != nil {
		return fmt.Errorf("redis: set directive of worker %s: %w", id, err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// DeleteWorker removes a record.
func (s *Store) DeleteWorker(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.workersKey(), id).Result()
	if err != nil {
		return false, fmt.Errorf("redis: delete worker %s: %w", id, err)
	}
	return n > 0, nil
}

// PruneWorkers removes the records last seen before before. It reads every record (the registry
// holds one per worker process, and pruning runs on admin requests at most hourly).
func (s *Store) PruneWorkers(ctx context.Context, before time.Time) (int, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return 0, err
	}
	var stale []string
	for _, w := range ws {
		if w.LastSeenAt.Before(before) {
			stale = append(stale, w.ID)
		}
	}
	if len(stale) == 0 {
		return 0, nil
	}
	n, err := s.rdb.HDel(ctx, s.workersKey(), stale...).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: prune workers: %w", err)
	}
	return int(n), nil
}

var _ store.SettingStore = (*Store)(nil)

func (s *Store) settingsKey() string { return s.prefix + "settings" }

// GetSetting returns the value under key, or nil.
func (s *Store) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	v, err := s.rdb.HGet(ctx, s.settingsKey(), key).Result()
	if err == goredis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis: get setting %s: %w", key, err)
	}
	return json.RawMessage(v), nil
}

// SetSetting stores value under key; nil removes it.
func (s *Store) SetSetting(ctx context.Context, key string, value json.RawMessage) error {
	var err error
	if value == nil {
		err = s.rdb.HDel(ctx, s.settingsKey(), key).Err()
	} else {
		err = s.rdb.HSet(ctx, s.settingsKey(), key, string(value)).Err()
	}
	if err != nil {
		return fmt.Errorf("redis: set setting %s: %w", key, err)
	}
	return nil
}

var _ store.SettingSwapper = (*Store)(nil)

// swapSettingScript changes field ARGV[1] of the settings hash (KEYS[1]) if it holds ARGV[3]
// (ARGV[2] '1'; '0': if it is absent): to ARGV[5] (ARGV[4] '1'; '0': removes it). It returns 1 when
// it changed the field, 0 when the field held something else.
var swapSettingScript = goredis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  if cur ~= ARGV[3] then return 0 end
elseif cur then
  return 0
end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
`)

// SwapSetting stores new under key (nil removes it) if the stored value is byte for byte old (nil:
// absent), in one script on the settings hash's slot.
func (s *Store) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	flag := func(v json.RawMessage) string {
		if v == nil {
			return "0"
		}
		return "1"
	}
	n, err := swapSettingScript.Run(ctx, s.rdb, []string{s.settingsKey()},
		key, flag(old), string(old), flag(new), string(new)).Int()
	if err != nil {
		return false, fmt.Errorf("redis: swap setting %s: %w", key, err)
	}
	return n == 1, nil
}
