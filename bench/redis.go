//go:build !benchworker || bw_extra

package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

func init() {
	register(prontoRedis{}, prontoRedis{remove: true}, prontoSQLiteProcs{}, prontoSQLiteProcs{notify: true}, prontoPGNoListen{}, prontoPGNoListen{notify: true})
}

// ---- pronto on Redis (store/redis) ----

// prontoRedis runs pronto on the Redis at $REDIS_ADDR (default 127.0.0.1:6379), each instance
// under a key prefix of its own. Like PostgreSQL, one instance serves several processes, so its
// workers run in child processes (inserts from the harness), as pronto's and River's do: the same
// work as theirs in the scenarios it runs (redisScenarios). remove deletes each job as it completes
// (QueueConfig.RemoveCompleted), in the drain only, as pronto-remove does on PostgreSQL.
type prontoRedis struct{ remove bool }

func (p prontoRedis) name() string {
	if p.remove {
		return "pronto-redis-remove"
	}
	return "pronto-redis"
}
func (prontoRedis) shared() bool                   { return true }
func (prontoRedis) workersFor(_ string, n int) int { return n }
func (prontoRedis) create(context.Context, *env, string) error {
	return nil
}

func redisAddr() string { return envOr("REDIS_ADDR", "127.0.0.1:6379") }

func redisPrefix(id string) string { return "bench:" + id + ":" }

// drop deletes the instance's keys (SCAN: the harness's own bookkeeping, off the measured path).
func (prontoRedis) drop(ctx context.Context, _ *env, id string) error {
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, redisPrefix(id)+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return iter.Err()
}

func (p prontoRedis) open(ctx context.Context, _ *env, id string) (instance, error) {
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr(), PoolSize: 32})
	st, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: redisPrefix(id)})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	count := countFinished(st)
	var inst *prontoInstance
	if p.remove {
		// Completed jobs are deleted: those finished are those inserted and no longer counted in
		// a state that is not terminal.
		count = func(ctx context.Context) (int64, error) {
			qs, err := st.ListQueues(ctx)
			if err != nil {
				return 0, err
			}
			n := inst.inserted.Load()
			for _, q := range qs {
				for state, c := range q.Counts {
					if !state.Terminal() {
						n -= c
					}
				}
			}
			return n, nil
		}
	}
	inst, err = newProntoInstance(st, nil, count)
	if err != nil {
		_ = st.Close()
		_ = rdb.Close()
		return nil, err
	}
	inst.removeCompleted = p.remove
	inst.onClose = func() { _ = rdb.Close() }
	return inst, nil
}

// ---- pronto on SQLite shared by several processes, woken through Redis (Config.Notifier) ----

// prontoSQLiteProcs runs pronto on one SQLite file shared by the harness (inserts) and worker
// processes: with notify set, every process has a Redis Notifier on the same channel (push pickup
// across processes); without, the workers find the harness's inserts by their 1 s poll.
type prontoSQLiteProcs struct{ notify bool }

func (p prontoSQLiteProcs) name() string {
	if p.notify {
		return "pronto-sqlite-redisnotify"
	}
	return "pronto-sqlite-procs"
}
func (prontoSQLiteProcs) shared() bool                   { return true }
func (prontoSQLiteProcs) workersFor(_ string, n int) int { return n }

// path does not depend on the harness's temporary folder, which the worker processes do not know.
func (prontoSQLiteProcs) path(id string) string {
	return filepath.Join(os.TempDir(), "pronto-bench-"+id+".db")
}

func (p prontoSQLiteProcs) create(ctx context.Context, _ *env, id string) error {
	st, err := sqlite.Open(ctx, p.path(id))
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Migrate(ctx)
}

func (p prontoSQLiteProcs) drop(_ context.Context, _ *env, id string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(p.path(id) + suffix)
	}
	return nil
}

func (p prontoSQLiteProcs) open(ctx context.Context, _ *env, id string) (instance, error) {
	st, err := sqlite.Open(ctx, p.path(id))
	if err != nil {
		return nil, err
	}
	var n *redisstore.Notifier
	if p.notify {
		n, err = redisstore.OpenNotifier(ctx, "redis://"+redisAddr()+"/0?channel=bench:{relay-"+id+"}")
		if err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	inst, err := newProntoInstance(st, nil, countFinished(st))
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	if n != nil {
		// The inserting client relays the store's inserts; the workers' clients take the same notifier.
		inst.inserter, err = pronto.NewClient(st, &pronto.Config{Notifier: n})
		if err != nil {
			_ = st.Close()
			_ = n.Close()
			return nil, err
		}
		inst.notifier = n
		inst.onClose = func() { _ = n.Close() }
	}
	return inst, nil
}

// ---- pronto on PostgreSQL without LISTEN, woken through Redis (Config.Notifier) ----

// prontoPGNoListen runs pronto on PostgreSQL with a listener that cannot connect, as behind a
// pooler that cannot LISTEN with no direct URL: with notify set every process has a Redis Notifier
// on the same channel (the inserting client announces its inserts); without, the workers find the
// jobs by their 1 s poll.
type prontoPGNoListen struct{ notify bool }

func (p prontoPGNoListen) name() string {
	if p.notify {
		return "pronto-nolisten-redisnotify"
	}
	return "pronto-nolisten"
}
func (prontoPGNoListen) shared() bool                   { return true }
func (prontoPGNoListen) workersFor(_ string, n int) int { return n }
func (prontoPGNoListen) create(ctx context.Context, e *env, id string) error {
	return prontoPG{}.create(ctx, e, id)
}
func (prontoPGNoListen) drop(ctx context.Context, e *env, id string) error {
	return dropSchema(ctx, e, id)
}

// noListenURL refuses connections (port 1): the store's listener never listens.
const noListenURL = "postgres://postgres@127.0.0.1:1/none?connect_timeout=1"

func (p prontoPGNoListen) open(ctx context.Context, e *env, id string) (instance, error) {
	pool, err := newPool(ctx, e.dbURL)
	if err != nil {
		return nil, err
	}
	st, err := postgres.New(pool, postgres.Config{Schema: id, ListenURL: noListenURL})
	if err != nil {
		pool.Close()
		return nil, err
	}
	inst, err := newProntoInstance(st, pool, func(ctx context.Context) (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{id, "jobs"}.Sanitize()+
			" WHERE state IN ('completed','discarded','cancelled')").Scan(&n)
		return n, err
	})
	if err != nil {
		st.Close()
		pool.Close()
		return nil, err
	}
	inst.schema = id
	if p.notify {
		n, err := redisstore.OpenNotifier(ctx, "redis://"+redisAddr()+"/0?channel=bench:{relay-"+id+"}")
		if err != nil {
			inst.close()
			return nil, err
		}
		if inst.inserter, err = pronto.NewClient(st, &pronto.Config{Notifier: n}); err != nil {
			inst.close()
			_ = n.Close()
			return nil, err
		}
		inst.notifier = n
		inst.onClose = func() { _ = n.Close() }
	}
	return inst, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
