package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// benchArgs is the one job type of every scenario, for both systems. Ins carries the moment the insert
// call began, so pickup latency is the worker's start minus Ins.
type benchArgs struct {
	Seq     int64 `json:"seq"`
	Ins     int64 `json:"ins"`
	Tenant  int   `json:"t,omitempty"`
	WorkUs  int64 `json:"w,omitempty"`
	FailPct int   `json:"f,omitempty"`
	// Mode, when set, makes the job write one row of its own to the application's table, staged or
	// atomic (processing_modes).
	Mode int `json:"m,omitempty"`
}

// Kind is a valid OJS type for pronto and a valid kind for River.
func (benchArgs) Kind() string { return "bench.job" }

// sink receives what workers do. start is called only when the scenario needs jobs that never
// finish to be visible (crash recovery); end is called when the worker returns.
type sink interface {
	start(seq int64, attempt int, startNs int64)
	end(a benchArgs, attempt int, startNs, endNs int64, ok bool)
}

var errSimulated429 = errors.New("simulated 429 Too Many Requests")

// failRoll is a deterministic roll in [0,100) per (seq, attempt), so every system sees the same
// attempts fail.
func failRoll(seq int64, attempt int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", seq, attempt)
	return int(h.Sum32() % 100)
}

// work is the body of every job: note the start, sleep the job's work time, fail when the roll says so.
func work(ctx context.Context, a benchArgs, attempt int, s sink) error {
	start := time.Now().UnixNano()
	s.start(a.Seq, attempt, start)
	if a.WorkUs > 0 {
		t := time.NewTimer(time.Duration(a.WorkUs) * time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.end(a, attempt, start, time.Now().UnixNano(), false)
			return ctx.Err()
		}
	}
	fail := a.FailPct > 0 && failRoll(a.Seq, attempt) < a.FailPct
	s.end(a, attempt, start, time.Now().UnixNano(), !fail)
	if fail {
		return errSimulated429
	}
	return nil
}

// env is what every system needs to reach its database.
type env struct {
	dbURL  string
	tmpDir string
}

// system is one contender: pronto on a store, or River at some settings.
type system interface {
	name() string
	// shared reports whether several processes can work one instance (PostgreSQL). Those systems run
	// their workers in child processes; the others run them inside the harness.
	shared() bool
	// create makes a fresh, migrated instance named id (a schema, or a file).
	create(ctx context.Context, e *env, id string) error
	// drop removes it.
	drop(ctx context.Context, e *env, id string) error
	// open connects to an instance created earlier.
	open(ctx context.Context, e *env, id string) (instance, error)
	// workersFor returns how many workers this system uses where a scenario asks for n
	// (River tuned uses 2000 in a drain, as its own bench does).
	workersFor(scenario string, n int) int
}

// instance is one open connection to a system's instance.
type instance interface {
	insert(ctx context.Context, a benchArgs, maxAttempts int) error
	insertMany(ctx context.Context, as []benchArgs, maxAttempts int) error
	// bulkLoad inserts a backlog as fast as the system allows (not measured).
	bulkLoad(ctx context.Context, as []benchArgs) error
	startWorkers(ctx context.Context, n int, s sink) (stop func(context.Context) error, err error)
	// finished counts jobs in a terminal state, from the database.
	finished(ctx context.Context) (int64, error)
	// pool is the PostgreSQL pool, or nil.
	pool() *pgxpool.Pool
	close()
}

func systemsByName() map[string]system {
	return map[string]system{
		"pronto":          prontoPG{},
		"pronto-unlogged": prontoPG{unlogged: true},
		"river":           riverSys{tuned: false},
		"river-tuned":     riverSys{tuned: true},
		"pronto-sqlite":   prontoSQLite{},
		"pronto-memory":   prontoMemory{},
		"pronto-redis":    prontoRedis{},
		"sql-limit":       sqlLimit{},

		"pronto-sqlite-procs":         prontoSQLiteProcs{},
		"pronto-sqlite-redisnotify":   prontoSQLiteProcs{notify: true},
		"pronto-nolisten":             prontoPGNoListen{},
		"pronto-nolisten-redisnotify": prontoPGNoListen{notify: true},
	}
}

var allSystemNames = []string{"pronto", "river", "river-tuned", "pronto-sqlite", "pronto-memory", "pronto-redis", "pronto-unlogged", "sql-limit",
	"pronto-sqlite-procs", "pronto-sqlite-redisnotify", "pronto-nolisten", "pronto-nolisten-redisnotify"}

func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

func dropSchema(ctx context.Context, e *env, schema string) error {
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

// ---- pronto on PostgreSQL ----

// prontoPG is pronto on PostgreSQL; unlogged makes its jobs table UNLOGGED (postgres.Store.SetUnlogged),
// which loses every job on a database crash, measured in the scenarios where the WAL matters.
type prontoPG struct{ unlogged bool }

func (p prontoPG) name() string {
	if p.unlogged {
		return "pronto-unlogged"
	}
	return "pronto"
}

// runs limits the unlogged variant to the throughput and WAL scenarios.
func (p prontoPG) runs(sc scenario) bool {
	return !p.unlogged || sc.kind == "drain" || sc.kind == "insert" || sc.kind == "roundtrip" || sc.kind == "wal"
}

func (prontoPG) shared() bool                                      { return true }
func (prontoPG) workersFor(_ string, n int) int                    { return n }
func (prontoPG) drop(ctx context.Context, e *env, id string) error { return dropSchema(ctx, e, id) }

func (s prontoPG) create(ctx context.Context, e *env, id string) error {
	p, err := newPool(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer p.Close()
	st, err := postgres.New(p, postgres.Config{Schema: id})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if s.unlogged {
		return st.SetUnlogged(ctx, true)
	}
	return nil
}

func (prontoPG) open(ctx context.Context, e *env, id string) (instance, error) {
	p, err := newPool(ctx, e.dbURL)
	if err != nil {
		return nil, err
	}
	st, err := postgres.New(p, postgres.Config{Schema: id})
	if err != nil {
		p.Close()
		return nil, err
	}
	inst, err := newProntoInstance(st, p, func(ctx context.Context) (int64, error) {
		var n int64
		err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{id, "jobs"}.Sanitize()+
			" WHERE state IN ('completed','discarded','cancelled')").Scan(&n)
		return n, err
	})
	if err != nil {
		st.Close()
		p.Close()
		return nil, err
	}
	inst.schema = id
	return inst, nil
}

// ---- pronto on SQLite ----

type prontoSQLite struct{}

func (prontoSQLite) name() string                   { return "pronto-sqlite" }
func (prontoSQLite) shared() bool                   { return false }
func (prontoSQLite) workersFor(_ string, n int) int { return n }

func (prontoSQLite) path(e *env, id string) string { return filepath.Join(e.tmpDir, id+".db") }

func (s prontoSQLite) create(ctx context.Context, e *env, id string) error {
	st, err := sqlite.Open(ctx, s.path(e, id))
	if err != nil {
		return err
	}
	defer st.Close()
	return st.Migrate(ctx)
}

func (s prontoSQLite) drop(_ context.Context, e *env, id string) error {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(s.path(e, id) + suffix)
	}
	return nil
}

func (s prontoSQLite) open(ctx context.Context, e *env, id string) (instance, error) {
	st, err := sqlite.Open(ctx, s.path(e, id))
	if err != nil {
		return nil, err
	}
	inst, err := newProntoInstance(st, nil, countFinished(st))
	if err != nil {
		st.Close()
		return nil, err
	}
	return inst, nil
}

// ---- pronto, common ----

type prontoInstance struct {
	st       store.Store
	p        *pgxpool.Pool
	schema   string // PostgreSQL only: where the application's table of processing_modes lives
	inserter *pronto.Client
	count    func(context.Context) (int64, error)
	// onClose releases what the system opened beside the store (the Redis client).
	onClose func()
	// notifier, when set, is given to the workers' client as Config.Notifier.
	notifier pronto.Notifier
}

func newProntoInstance(st store.Store, p *pgxpool.Pool, count func(context.Context) (int64, error)) (*prontoInstance, error) {
	c, err := pronto.NewClient(st, nil)
	if err != nil {
		return nil, err
	}
	return &prontoInstance{st: st, p: p, inserter: c, count: count}, nil
}

// countFinished counts the store's finished jobs (completed, discarded, cancelled) through its
// queue statistics, for the stores that run inside the harness.
func countFinished(st store.Store) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		qs, err := st.ListQueues(ctx)
		if err != nil {
			return 0, err
		}
		var n int64
		for _, q := range qs {
			n += q.Counts[store.StateCompleted] + q.Counts[store.StateDiscarded] + q.Counts[store.StateCancelled]
		}
		return n, nil
	}
}

func prontoOpts(maxAttempts int) *pronto.InsertOpts {
	if maxAttempts <= 0 {
		return nil
	}
	return &pronto.InsertOpts{MaxAttempts: maxAttempts}
}

func (i *prontoInstance) insert(ctx context.Context, a benchArgs, maxAttempts int) error {
	_, err := i.inserter.Insert(ctx, a, prontoOpts(maxAttempts))
	return err
}

func (i *prontoInstance) insertMany(ctx context.Context, as []benchArgs, maxAttempts int) error {
	ps := make([]pronto.InsertManyParams, len(as))
	o := prontoOpts(maxAttempts)
	for k := range as {
		ps[k] = pronto.InsertManyParams{Args: as[k], Opts: o}
	}
	_, err := i.inserter.InsertMany(ctx, ps)
	return err
}

func (i *prontoInstance) bulkLoad(ctx context.Context, as []benchArgs) error {
	return i.insertMany(ctx, as, 0)
}

func (i *prontoInstance) startWorkers(ctx context.Context, n int, s sink) (func(context.Context) error, error) {
	ws := pronto.NewWorkers()
	pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[benchArgs]) error {
		if j.Args.Mode != 0 {
			return effectWork(ctx, i.p, i.schema, j.Args, j.Attempt, s, func(tx pgx.Tx) error {
				return pronto.CompleteTx(ctx, tx)
			})
		}
		return work(ctx, j.Args, j.Attempt, s)
	}))
	c, err := pronto.NewClient(i.st, &pronto.Config{
		Queues:   map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: n}},
		Workers:  ws,
		Notifier: i.notifier,
	})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c.Stop, nil
}

func (i *prontoInstance) finished(ctx context.Context) (int64, error) { return i.count(ctx) }
func (i *prontoInstance) pool() *pgxpool.Pool                         { return i.p }

func (i *prontoInstance) close() {
	_ = i.st.Close()
	if i.onClose != nil {
		i.onClose()
	}
	if i.p != nil {
		i.p.Close()
	}
}

// ---- River ----

type riverSys struct{ tuned bool }

func (r riverSys) name() string {
	if r.tuned {
		return "river-tuned"
	}
	return "river"
}
func (riverSys) shared() bool { return true }
func (r riverSys) workersFor(scenario string, n int) int {
	if r.tuned && scenario == "drain" {
		return 2000
	}
	return n
}
func (riverSys) drop(ctx context.Context, e *env, id string) error { return dropSchema(ctx, e, id) }

func (riverSys) create(ctx context.Context, e *env, id string) error {
	p, err := newPool(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{id}.Sanitize()); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(p), &rivermigrate.Config{Schema: id, Logger: quietLogger()})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func (r riverSys) open(ctx context.Context, e *env, id string) (instance, error) {
	p, err := newPool(ctx, e.dbURL)
	if err != nil {
		return nil, err
	}
	c, err := river.NewClient(riverpgxv5.New(p), &river.Config{Schema: id, Logger: quietLogger()})
	if err != nil {
		p.Close()
		return nil, err
	}
	return &riverInstance{sys: r, schema: id, p: p, inserter: c}, nil
}

type riverInstance struct {
	sys      riverSys
	schema   string
	p        *pgxpool.Pool
	inserter *river.Client[pgx.Tx]
}

func riverOpts(maxAttempts int) *river.InsertOpts {
	if maxAttempts <= 0 {
		return nil
	}
	return &river.InsertOpts{MaxAttempts: maxAttempts}
}

func (i *riverInstance) insert(ctx context.Context, a benchArgs, maxAttempts int) error {
	_, err := i.inserter.Insert(ctx, a, riverOpts(maxAttempts))
	return err
}

// insertMany uses InsertMany at River's defaults (what a user calls first), and InsertManyFast (COPY)
// for River tuned: its fastest bulk path.
func (i *riverInstance) insertMany(ctx context.Context, as []benchArgs, maxAttempts int) error {
	ps := make([]river.InsertManyParams, len(as))
	o := riverOpts(maxAttempts)
	for k := range as {
		ps[k] = river.InsertManyParams{Args: as[k], InsertOpts: o}
	}
	if i.sys.tuned {
		_, err := i.inserter.InsertManyFast(ctx, ps)
		return err
	}
	_, err := i.inserter.InsertMany(ctx, ps)
	return err
}

func (i *riverInstance) bulkLoad(ctx context.Context, as []benchArgs) error {
	ps := make([]river.InsertManyParams, len(as))
	for k := range as {
		ps[k] = river.InsertManyParams{Args: as[k]}
	}
	_, err := i.inserter.InsertManyFast(ctx, ps)
	return err
}

func (i *riverInstance) startWorkers(ctx context.Context, n int, s sink) (func(context.Context) error, error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[benchArgs]) error {
		if j.Args.Mode != 0 {
			return effectWork(ctx, i.p, i.schema, j.Args, j.Attempt, s, func(tx pgx.Tx) error {
				_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, j)
				return err
			})
		}
		return work(ctx, j.Args, j.Attempt, s)
	}))
	cfg := &river.Config{
		Schema:  i.schema,
		Logger:  quietLogger(),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: n}},
		Workers: ws,
	}
	if i.sys.tuned {
		cfg.FetchCooldown = 2 * time.Millisecond
		cfg.FetchPollInterval = 20 * time.Millisecond
	}
	c, err := river.NewClient(riverpgxv5.New(i.p), cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c.Stop, nil
}

func (i *riverInstance) finished(ctx context.Context) (int64, error) {
	var n int64
	err := i.p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{i.schema, "river_job"}.Sanitize()+
		" WHERE state IN ('completed','discarded','cancelled')").Scan(&n)
	return n, err
}
func (i *riverInstance) pool() *pgxpool.Pool { return i.p }
func (i *riverInstance) close()              { i.p.Close() }
