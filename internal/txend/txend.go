// Package txend tells, from outside an application's transaction, whether it has ended (committed
// or rolled back): jobs inserted into it count against the bounds of a queue or tenant until then,
// since a read of the store sees them only once it commits. Neither pgx nor database/sql says when
// a transaction ends, so a client asks now and then.
package txend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RowQuerier runs a query of one row: a pgx.Tx, a *pgxpool.Pool.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// idSQL reads the id of the top-level transaction it runs in (also from a subtransaction), NULL
// when that has written nothing: it assigns none.
const idSQL = `SELECT pg_current_xact_id_if_assigned()::text`

// PgxID returns the id of the PostgreSQL transaction tx, "" when it has written nothing (nothing to
// wait for). One round trip in tx, on the goroutine using it.
func PgxID(ctx context.Context, tx RowQuerier) (string, error) {
	var id *string
	if err := tx.QueryRow(ctx, idSQL).Scan(&id); err != nil {
		return "", fmt.Errorf("read the transaction's id: %w", err)
	}
	if id == nil {
		return "", nil
	}
	return *id, nil
}

// endedSQL reports whether a snapshot taken now sees transaction $1 ended, committed or rolled back
// (a transaction in progress is in the snapshot's list, or at or past its xmax), so that every later
// read sees its rows or their absence: pg_xact_status may say committed a moment before new
// snapshots see the commit.
const endedSQL = `SELECT pg_visible_in_snapshot($1::xid8, pg_current_snapshot())`

// PgxEnded reports whether the transaction with id (from PgxID) has ended, as q's database sees it
// now. One round trip on q (the store's pool, not the transaction).
func PgxEnded(ctx context.Context, q RowQuerier, id string) (bool, error) {
	var ended bool
	if err := q.QueryRow(ctx, endedSQL, id).Scan(&ended); err != nil {
		return false, fmt.Errorf("read whether transaction %s ended: %w", id, err)
	}
	return ended, nil
}

// SQLEnded reports whether tx has been committed or rolled back. database/sql answers ErrTxDone
// without I/O once it has; while it is open, a trivial read runs in it (database/sql lets a
// transaction be used from several goroutines, one statement at a time).
func SQLEnded(ctx context.Context, tx *sql.Tx) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, sql.ErrTxDone):
		return true, nil
	default:
		return false, fmt.Errorf("read whether the transaction ended: %w", err)
	}
}
