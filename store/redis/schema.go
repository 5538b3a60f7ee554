package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

var (
	_ store.QueueBounder = (*Store)(nil)
	_ store.SchemaStore  = (*Store)(nil)
)

// Queue bounds: the global hash <prefix>bounds maps a bounded queue to its maximum depth.

func (s *Store) boundsKey() string { return s.prefix + "bounds" }

// SetQueueMaxDepth stores queue's maximum depth; 0 removes the bound.
func (s *Store) SetQueueMaxDepth(ctx context.Context, queue string, maxDepth int64) error {
	var err error
	if maxDepth <= 0 {
		err = s.rdb.HDel(ctx, s.boundsKey(), queue).Err()
	} else {
		err = s.rdb.HSet(ctx, s.boundsKey(), queue, maxDepth).Err()
	}
	if err != nil {
		return fmt.Errorf("redis: set the maximum depth of %s: %w", queue, err)
	}
	return nil
}

// QueueMaxDepths returns the maximum depth of every bounded queue.
func (s *Store) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, s.boundsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: queue bounds: %w", err)
	}
	out := make(map[string]int64, len(m))
	for q, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redis: queue bound of %s: %q is not a number", q, v)
		}
		out[q] = n
	}
	return out, nil
}

// QueueDepths counts the jobs in store.NonTerminalStates of each of queues, from the per-state
// sets' cardinalities, in one pipelined round trip.
func (s *Store) QueueDepths(ctx context.Context, queues []string) (map[string]int64, error) {
	cmds := make([][]*goredis.IntCmd, len(queues))
	_, err := s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, q := range queues {
			for _, st := range store.NonTerminalStates {
				cmds[i] = append(cmds[i], pl.ZCard(ctx, s.qkey(q)+"st:"+string(st)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: queue depths: %w", err)
	}
	out := make(map[string]int64, len(queues))
	for i, q := range queues {
		var n int64
		for _, c := range cmds[i] {
			n += c.Val()
		}
		out[q] = n
	}
	return out, nil
}

// Job schemas share the hash tag {schema}: <prefix>{schema}:s:<uri> (hash: uri, kind, version,
// schema, created µs) and <prefix>{schema}:all (URIs by creation time).

func (s *Store) schemaKeys(uri string) []string {
	return []string{s.prefix + "{schema}:s:" + uri, s.prefix + "{schema}:all"}
}

// SchemaCreate stores a new schema; an existing URI gives ErrDuplicate.
func (s *Store) SchemaCreate(ctx context.Context, js *store.JobSchema) error {
	created := js.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	us := micros(created)
	n, err := scriptSchemaCreate.Run(ctx, s.rdb, s.schemaKeys(js.URI), js.URI, us,
		"uri", js.URI, "kind", js.Kind, "version", js.Version, "schema", string(js.Schema), "created", us).Int()
	if err != nil {
		return fmt.Errorf("redis: create schema %s: %w", js.URI, err)
	}
	if n == 0 {
		return fmt.Errorf("redis: create schema %s: %w", js.URI, store.ErrDuplicate)
	}
	return nil
}

func decodeSchema(m map[string]string) *store.JobSchema {
	if m["uri"] == "" {
		return nil
	}
	return &store.JobSchema{URI: m["uri"], Kind: m["kind"], Version: m["version"], Schema: []byte(m["schema"]),
		CreatedAt: fromMicros(m["created"])}
}

func schemaNotFound(uri string) error {
	return fmt.Errorf("redis: schema %s: %w", uri, store.ErrNotFound)
}

// SchemaGet returns the schema with uri, or ErrNotFound.
func (s *Store) SchemaGet(ctx context.Context, uri string) (*store.JobSchema, error) {
	m, err := s.rdb.HGetAll(ctx, s.schemaKeys(uri)[0]).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: schema %s: %w", uri, err)
	}
	js := decodeSchema(m)
	if js == nil {
		return nil, schemaNotFound(uri)
	}
	return js, nil
}

// SchemaList returns every schema, oldest first (ties by URI).
func (s *Store) SchemaList(ctx context.Context) ([]*store.JobSchema, error) {
	uris, err := s.rdb.ZRange(ctx, s.prefix+"{schema}:all", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: schemas: %w", err)
	}
	cmds := make([]*goredis.MapStringStringCmd, len(uris))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, u := range uris {
			cmds[i] = pl.HGetAll(ctx, s.schemaKeys(u)[0])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: schemas: %w", err)
	}
	out := make([]*store.JobSchema, 0, len(uris))
	for _, c := range cmds {
		if js := decodeSchema(c.Val()); js != nil {
			out = append(out, js)
		}
	}
	return out, nil
}

// SchemaDelete removes the schema with uri and returns it as it was, or gives ErrNotFound.
func (s *Store) SchemaDelete(ctx context.Context, uri string) (*store.JobSchema, error) {
	res, err := scriptSchemaDelete.Run(ctx, s.rdb, s.schemaKeys(uri), uri).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: delete schema %s: %w", uri, err)
	}
	m, err := flatToMap(res)
	if err != nil {
		return nil, err
	}
	js := decodeSchema(m)
	if js == nil {
		return nil, schemaNotFound(uri)
	}
	return js, nil
}
