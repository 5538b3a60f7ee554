package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Processing modes (processing_modes, issue 13 item 6, after seed 002): every job writes one row of
// its own to an application table in the same database as the jobs.
//   - staged: the row commits on its own, and the job's outcome is written after Work returns, in a
//     second transaction (each system's default path).
//   - atomic: the row and the job's completion commit in one transaction (pronto.CompleteTx,
//     river.JobCompleteTx), so a crash can never separate them.
const (
	modeStaged = 1
	modeAtomic = 2
)

// effectsTable is the application's table of an instance (its schema).
func effectsTable(schema string) string { return pgx.Identifier{schema, "bench_effects"}.Sanitize() }

// effectWork is the body of a processing_modes job: write the job's row, staged or atomic. completeTx
// completes the running job inside tx, the system's own way.
func effectWork(ctx context.Context, p *pgxpool.Pool, schema string, a benchArgs, attempt int, s sink, completeTx func(pgx.Tx) error) error {
	if p == nil || schema == "" {
		return errors.New("processing modes need a PostgreSQL system")
	}
	start := time.Now().UnixNano()
	s.start(a.Seq, attempt, start)
	q := "INSERT INTO " + effectsTable(schema) + " (seq, attempt) VALUES ($1, $2)"
	var err error
	switch a.Mode {
	case modeStaged:
		_, err = p.Exec(ctx, q, a.Seq, attempt)
	case modeAtomic:
		err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, q, a.Seq, attempt); err != nil {
				return err
			}
			return completeTx(tx)
		})
	default:
		err = fmt.Errorf("unknown processing mode %d", a.Mode)
	}
	s.end(a, attempt, start, time.Now().UnixNano(), err == nil)
	return err
}
