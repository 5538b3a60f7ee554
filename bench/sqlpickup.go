//go:build !benchworker || bw_sql

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

func init() { register(sqlPickup{}) }

// sqlPickup is not a job queue either: it is the shortest path from an insert to a worker that we
// know how to write on PostgreSQL with LISTEN/NOTIFY, so that pronto's pickup latency can be read
// against what this machine allows at all, as sql-limit bounds the drain. On sql-limit's bare table:
// the insert is one statement, the row and a pg_notify committed together (durably, as a job
// queue's insert must be); one connection LISTENs; each notification makes one claim (FOR UPDATE
// SKIP LOCKED, as many rows as there are free workers, committed without waiting for its WAL flush,
// as pronto's claim is) and each claimed row goes to a free worker goroutine; a worker's completion
// is one UPDATE. Nothing else: no leases, retries, rescue, fencing, priorities or batching of
// outcomes, so a crash would leave claimed rows behind.
type sqlPickup struct{}

func (sqlPickup) name() string                                      { return "sql-pickup" }
func (sqlPickup) shared() bool                                      { return true }
func (sqlPickup) workersFor(_ string, n int) int                    { return n }
func (sqlPickup) drop(ctx context.Context, e *env, id string) error { return dropSchema(ctx, e, id) }
func (sqlPickup) create(ctx context.Context, e *env, id string) error {
	return sqlLimit{}.create(ctx, e, id)
}

func (sqlPickup) open(ctx context.Context, e *env, id string) (instance, error) {
	b, err := openBareTable(ctx, e.dbURL, id, 4)
	if err != nil {
		return nil, err
	}
	return &sqlPickupInstance{
		bareTable: b,
		dbURL:     e.dbURL,
		channel:   id + "_jobs",
		insertSQL: `WITH j AS (INSERT INTO ` + b.table + ` (args) VALUES ($1) RETURNING id) SELECT pg_notify($2, '') FROM j`,
		complete:  `UPDATE ` + b.table + ` SET state = 2, finalized_at = now() WHERE id = $1`,
	}, nil
}

type sqlPickupInstance struct {
	bareTable
	dbURL, channel, insertSQL, complete string
}

func (i *sqlPickupInstance) insert1(ctx context.Context, a benchArgs) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = i.p.Exec(ctx, i.insertSQL, b, i.channel)
	return err
}

func (i *sqlPickupInstance) insert(ctx context.Context, a benchArgs, _ int) error {
	return i.insert1(ctx, a)
}

func (i *sqlPickupInstance) insertMany(ctx context.Context, as []benchArgs, _ int) error {
	for _, a := range as {
		if err := i.insert1(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

func (i *sqlPickupInstance) bulkLoad(ctx context.Context, as []benchArgs) error {
	return i.insertMany(ctx, as, 0)
}

// startWorkers listens on its own connection and, on every notification (or after a second
// without one), claims as many rows as workers are free, until a claim comes back short.
func (i *sqlPickupInstance) startWorkers(ctx context.Context, n int, s sink) (func(context.Context) error, error) {
	conn, err := pgx.Connect(ctx, i.dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{i.channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	g := newLoops(ctx)
	type claimed struct {
		id      int64
		attempt int16
		args    []byte
	}
	jobs := make(chan claimed, n)
	var free atomic.Int64
	free.Store(int64(n))
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for range n {
		g.run(func(ctx context.Context) error { // a worker
			for {
				select {
				case <-ctx.Done():
					return nil
				case c := <-jobs:
					var a benchArgs
					if err := json.Unmarshal(c.args, &a); err != nil {
						return err
					}
					if work(ctx, a, int(c.attempt), s) == nil {
						_, err := i.p.Exec(ctx, i.complete, c.id)
						g.fail(err)
					}
					free.Add(1)
					signal()
				}
			}
		})
	}
	g.run(func(ctx context.Context) error { // the listener
		defer conn.Close(context.Background())
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return err
			}
			signal()
		}
	})
	g.run(func(ctx context.Context) error { // the claimer
		poll := time.NewTicker(time.Second)
		defer poll.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-poll.C:
			}
			for ctx.Err() == nil {
				limit := free.Load()
				if limit <= 0 {
					break
				}
				b := &pgx.Batch{}
				b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
				b.Queue(i.claim, limit)
				br := i.p.SendBatch(ctx, b)
				var got []claimed
				_, err := br.Exec()
				if err == nil {
					var rows pgx.Rows
					rows, err = br.Query()
					for err == nil && rows.Next() {
						var c claimed
						err = rows.Scan(&c.id, &c.attempt, &c.args)
						got = append(got, c)
					}
					if err == nil {
						err = rows.Err()
					}
					rows.Close()
				}
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("sql-pickup claim: %w", err)
				}
				free.Add(-int64(len(got)))
				for _, c := range got {
					jobs <- c
				}
				if int64(len(got)) < limit {
					break
				}
			}
		}
	})
	return g.stop, nil
}
