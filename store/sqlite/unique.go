package sqlite

import (
	"context"
	"errors"

	sqlite3 "modernc.org/sqlite/lib"
)

// retryLapsed runs a statement that may move jobs into their unique states (run, which reads its
// result too) and, when it ran into the unique index, clears on ex the keys of the holders whose
// period ran out by nowUS (releaseLapsedSQL) and runs it once more. Such a holder holds nothing, so
// uniqueKeyAfter lets the entering job keep its key; but the holder still sits in the index, and
// the statement cannot clear another row's key itself. A failed statement changed nothing (SQLite
// undoes it, leaving the transaction, if any, open), so running it again is safe.
func retryLapsed[T any](ctx context.Context, ex execer, nowUS int64, run func() (T, error)) (T, error) {
	v, err := run()
	if sqliteCode(err) != sqlite3.SQLITE_CONSTRAINT_UNIQUE {
		return v, err
	}
	if _, rerr := ex.ExecContext(ctx, releaseLapsedSQL, nowUS); rerr != nil {
		return v, errors.Join(err, rerr)
	}
	return run()
}
