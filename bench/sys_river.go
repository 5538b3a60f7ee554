//go:build !benchworker || bw_river

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

func init() { register(riverSys{}, riverSys{tuned: true}) }

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
		return tunedDrainWorkers
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
