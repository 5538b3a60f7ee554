package txend_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/txend"
)

// TestPgxEnded: a transaction that wrote is seen open until it commits or rolls back, and ended from
// then on; one that wrote nothing has no id.
func TestPgxEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testdb.NewPool(t, 2)
	schema := testdb.Schema(t)
	_, err := pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.rows (x int)`)
	require.NoError(t, err)

	for _, commit := range []bool{true, false} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // before the pool closes: it waits for tx
		id, err := txend.PgxID(ctx, tx)
		require.NoError(t, err)
		require.Empty(t, id, "a transaction that wrote nothing")
		_, err = tx.Exec(ctx, `SAVEPOINT s; INSERT INTO `+schema+`.rows VALUES (1); RELEASE s`)
		require.NoError(t, err)
		id, err = txend.PgxID(ctx, tx)
		require.NoError(t, err)
		require.NotEmpty(t, id)

		ended, err := txend.PgxEnded(ctx, pool, id)
		require.NoError(t, err)
		require.False(t, ended, "an open transaction seen ended")
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		ended, err = txend.PgxEnded(ctx, pool, id)
		require.NoError(t, err)
		require.True(t, ended, "commit %v", commit)
	}
}

// TestSQLEnded: a database/sql transaction is seen open until it commits or rolls back, from
// another goroutine than the one using it.
func TestSQLEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	for _, commit := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		_, err = tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS rows (x int); INSERT INTO rows VALUES (1)`)
		require.NoError(t, err)
		seen := make(chan error)
		go func() {
			ended, err := txend.SQLEnded(ctx, tx)
			if err == nil && ended {
				err = errors.New("an open transaction seen ended")
			}
			seen <- err
		}()
		require.NoError(t, <-seen)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		ended, err := txend.SQLEnded(ctx, tx)
		require.NoError(t, err)
		require.True(t, ended, "commit %v", commit)
	}
}
