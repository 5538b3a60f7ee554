//go:build !benchworker || bw_sql

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func init() { register(sqlLimit{}) }

// sqlLimit is not a job queue: it is the fastest drain of a job table we know how to write in SQL,
// run on the same database in the same invocation, so every drain figure can be read as a fraction
// of what this machine's PostgreSQL allows at all. A bare table (id, state, attempt, args, two
// timestamps) with one partial index over the claimable rows; each connection claims 100 rows with
// FOR UPDATE SKIP LOCKED and, in the same round trip, completes the 100 it claimed before. Nothing
// else: no leases, no retries, no notifications, no fencing. Claims commit before the work runs, as
// a queue's must, so a crash would leave rows in state 1 (a real queue needs a rescuer for those).
type sqlLimit struct{}

// sqlLimitConns is how many connections drain the table: on the 2-core machines this bench runs on,
// 4 was the fastest of 2, 4 and 8 (docs/benchmarks.md).
const sqlLimitConns = 4

// sqlLimitBatch is how many rows each claim takes.
const sqlLimitBatch = 100

func (sqlLimit) name() string                                      { return "sql-limit" }
func (sqlLimit) shared() bool                                      { return true }
func (sqlLimit) workersFor(_ string, _ int) int                    { return sqlLimitConns }
func (sqlLimit) drop(ctx context.Context, e *env, id string) error { return dropSchema(ctx, e, id) }

func (sqlLimit) create(ctx context.Context, e *env, id string) error {
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	s := pgx.Identifier{id}.Sanitize()
	_, err = conn.Exec(ctx, `CREATE SCHEMA `+s+`;
CREATE TABLE `+s+`.jobs (
	id bigserial PRIMARY KEY,
	state smallint NOT NULL DEFAULT 0, -- 0 waiting, 1 claimed, 2 done
	attempt smallint NOT NULL DEFAULT 0,
	args jsonb NOT NULL,
	attempted_at timestamptz,
	finalized_at timestamptz
);
CREATE INDEX jobs_waiting ON `+s+`.jobs (id) WHERE state = 0;`)
	return err
}

func (sqlLimit) open(ctx context.Context, e *env, id string) (instance, error) {
	b, err := openBareTable(ctx, e.dbURL, id, sqlLimitConns+1)
	if err != nil {
		return nil, err
	}
	return &sqlLimitInstance{
		bareTable: b,
		schema:    id,
		complete:  `UPDATE ` + b.table + ` SET state = 2, finalized_at = now() WHERE id = ANY($1)`,
	}, nil
}

type sqlLimitInstance struct {
	bareTable
	schema, complete string
}

// bareTable is the job table of sql-limit and sql-pickup (see sqlLimit.create) on its pool.
type bareTable struct {
	p     *pgxpool.Pool
	table string
	// claim takes up to $1 waiting rows and returns their id, attempt and args.
	claim string
}

// openBareTable opens a pool of at most conns connections to the bare table in schema.
func openBareTable(ctx context.Context, url, schema string, conns int32) (bareTable, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return bareTable{}, err
	}
	cfg.MaxConns = conns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return bareTable{}, err
	}
	t := pgx.Identifier{schema, "jobs"}.Sanitize()
	return bareTable{p: p, table: t,
		claim: `UPDATE ` + t + ` j SET state = 1, attempt = j.attempt + 1, attempted_at = now()
FROM (SELECT id FROM ` + t + ` WHERE state = 0 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) c
WHERE j.id = c.id RETURNING j.id, j.attempt, j.args`}, nil
}

var errSQLLimitDrainOnly = errors.New("sql-limit takes part in the drain only")

func (i *sqlLimitInstance) insert(context.Context, benchArgs, int) error { return errSQLLimitDrainOnly }
func (i *sqlLimitInstance) insertMany(context.Context, []benchArgs, int) error {
	return errSQLLimitDrainOnly
}

// bulkLoad copies the backlog in, as the other systems' bulk loads do (not measured).
func (i *sqlLimitInstance) bulkLoad(ctx context.Context, as []benchArgs) error {
	rows := make([][]any, len(as))
	for k, a := range as {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		rows[k] = []any{b}
	}
	_, err := i.p.CopyFrom(ctx, pgx.Identifier{i.schema, "jobs"}, []string{"args"}, pgx.CopyFromRows(rows))
	return err
}

// startWorkers runs n connections, each looping: complete what it claimed last time and claim the
// next batch in one round trip, then run the batch's jobs.
func (i *sqlLimitInstance) startWorkers(ctx context.Context, n int, s sink) (func(context.Context) error, error) {
	g := newLoops(ctx)
	for range n {
		g.run(func(ctx context.Context) error { return i.drainLoop(ctx, s) })
	}
	return g.stop, nil
}

// loops runs the goroutines of a bare-SQL system until stopped and gathers their errors (those
// after the stop are the stop's doing, and left out).
type loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func newLoops(ctx context.Context) *loops {
	ctx, cancel := context.WithCancel(ctx)
	return &loops{ctx: ctx, cancel: cancel}
}

// run runs f in a goroutine of its own and keeps its error.
func (l *loops) run(f func(ctx context.Context) error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.fail(f(l.ctx))
	}()
}

// fail keeps err unless it is nil or the loops are stopping.
func (l *loops) fail(err error) {
	if err != nil && l.ctx.Err() == nil {
		l.mu.Lock()
		l.err = errors.Join(l.err, err)
		l.mu.Unlock()
	}
}

// stop ends the loops, waits for them and returns what they failed with.
func (l *loops) stop(context.Context) error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (i *sqlLimitInstance) drainLoop(ctx context.Context, s sink) error {
	var done []int64
	for ctx.Err() == nil {
		b := &pgx.Batch{}
		if len(done) > 0 {
			b.Queue(i.complete, done)
		}
		b.Queue(i.claim, sqlLimitBatch)
		br := i.p.SendBatch(ctx, b)
		if len(done) > 0 {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return fmt.Errorf("sql-limit complete: %w", err)
			}
		}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("sql-limit claim: %w", err)
		}
		done = done[:0]
		type claimed struct {
			id      int64
			attempt int16
			args    []byte
		}
		var batch []claimed
		for rows.Next() {
			var c claimed
			if err := rows.Scan(&c.id, &c.attempt, &c.args); err != nil {
				rows.Close()
				_ = br.Close()
				return err
			}
			batch = append(batch, c)
		}
		rows.Close()
		if err := br.Close(); err != nil {
			return fmt.Errorf("sql-limit claim: %w", err)
		}
		for _, c := range batch {
			var a benchArgs
			if err := json.Unmarshal(c.args, &a); err != nil {
				return err
			}
			if err := work(ctx, a, int(c.attempt), s); err == nil {
				done = append(done, c.id)
			}
		}
		if len(batch) == 0 && len(done) == 0 {
			// An empty table: wait briefly rather than spin (the drain ends when the count is reached).
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

func (b bareTable) finished(ctx context.Context) (int64, error) {
	var n int64
	err := b.p.QueryRow(ctx, `SELECT count(*) FROM `+b.table+` WHERE state = 2`).Scan(&n)
	return n, err
}

func (b bareTable) pool() *pgxpool.Pool { return b.p }
func (b bareTable) close()              { b.p.Close() }
