//go:build !benchworker || bw_pronto || bw_extra

package main

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

func init() {
	register(prontoPG{}, prontoPG{unlogged: true}, prontoPG{tunedWorkers: true}, prontoPG{noHandoff: true}, prontoPG{noPrefetch: true},
		prontoPG{remove: true})
}

// ---- pronto on PostgreSQL ----

// prontoPG is pronto on PostgreSQL; unlogged makes its jobs table UNLOGGED (postgres.Store.SetUnlogged),
// which loses every job on a database crash, measured in the scenarios where the WAL matters;
// tunedWorkers gives it River tuned's worker count in the drain (tunedDrainWorkers), so that the
// drain is also compared at equal workers; noHandoff turns the hand-off off
// (postgres.Config.NoHandoff), to measure what it gives pickup and CPU; noPrefetch turns the
// queue's prefetch off (QueueConfig.Prefetch = pronto.NoPrefetch; pronto's default until the
// twenty-second session), to measure what prefetching by itself gives the drain; remove deletes
// each job as it completes (QueueConfig.RemoveCompleted), to measure what keeping completed jobs
// costs the drain.
type prontoPG struct{ unlogged, tunedWorkers, noHandoff, noPrefetch, remove bool }

func (p prontoPG) name() string {
	switch {
	case p.unlogged:
		return "pronto-unlogged"
	case p.tunedWorkers:
		return "pronto-2000w"
	case p.noHandoff:
		return "pronto-nohandoff"
	case p.noPrefetch:
		return "pronto-noprefetch"
	case p.remove:
		return "pronto-remove"
	}
	return "pronto"
}

func (p prontoPG) workersFor(scenario string, n int) int {
	if p.tunedWorkers && scenario == "drain" {
		return tunedDrainWorkers
	}
	return n
}

func (prontoPG) shared() bool                                      { return true }
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

func (s prontoPG) open(ctx context.Context, e *env, id string) (instance, error) {
	p, err := newPool(ctx, e.dbURL)
	if err != nil {
		return nil, err
	}
	st, err := postgres.New(p, postgres.Config{Schema: id, NoHandoff: s.noHandoff})
	if err != nil {
		p.Close()
		return nil, err
	}
	var inst *prontoInstance
	inst, err = newProntoInstance(st, p, func(ctx context.Context) (int64, error) {
		var n int64
		if s.remove {
			// Completed jobs are deleted: those finished are those inserted and no longer waiting
			// or running.
			err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{id, "jobs"}.Sanitize()+
				" WHERE state NOT IN ('completed','discarded','cancelled')").Scan(&n)
			return inst.inserted.Load() - n, err
		}
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
	if s.noPrefetch {
		inst.prefetch = pronto.NoPrefetch
	}
	inst.removeCompleted = s.remove
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
	// prefetch is the workers' QueueConfig.Prefetch (0: pronto's default, which prefetches by itself
	// through a backlog of short jobs).
	prefetch int
	// removeCompleted is the workers' QueueConfig.RemoveCompleted.
	removeCompleted bool
	// inserted counts the jobs this instance inserted (for a count of finished jobs that are
	// deleted as they complete).
	inserted atomic.Int64
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
	if err == nil {
		i.inserted.Add(1)
	}
	return err
}

func (i *prontoInstance) insertMany(ctx context.Context, as []benchArgs, maxAttempts int) error {
	ps := make([]pronto.InsertManyParams, len(as))
	o := prontoOpts(maxAttempts)
	for k := range as {
		ps[k] = pronto.InsertManyParams{Args: as[k], Opts: o}
	}
	// Counted, not returned: River tuned's InsertManyFast is the same choice.
	n, err := i.inserter.InsertManyFast(ctx, ps)
	i.inserted.Add(int64(n))
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
		Queues:   map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: n, Prefetch: i.prefetch, RemoveCompleted: i.removeCompleted}},
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
