package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// tunedDrainWorkers is River tuned's worker count in the drain (its own benchmark's setting), which
// pronto-2000w takes too.
const tunedDrainWorkers = 2000

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
	dbURL string
	// tmpDir holds the in-process stores' files (the harness's, not a worker binary's).
	tmpDir string //lint:ignore U1000 the worker binaries (worker.go) run no in-process store

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

// registry holds every system compiled into this binary, by name: each system's file registers its
// own, so a worker binary built for one system (worker.go) holds that system's code only.
var registry = map[string]system{}

// register adds systems to the registry.
func register(ss ...system) {
	for _, s := range ss {
		registry[s.name()] = s
	}
}

func systemsByName() map[string]system { return registry }

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
