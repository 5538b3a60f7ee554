package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/pgcluster"
)

// TestRestartKeepsCommittedData: a private cluster starts, serves, and keeps what was committed
// across a fast restart and a crash (immediate), on the same URL.
func TestRestartKeepsCommittedData(t *testing.T) {
	c := pgcluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func(sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	count := func() int {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n))
		return n
	}
	exec("CREATE TABLE kept (n int)")
	exec("INSERT INTO kept VALUES (1)")
	c.Restart("fast")
	require.Equal(t, 1, count())
	exec("INSERT INTO kept VALUES (2)")
	c.Restart("immediate")
	require.Equal(t, 2, count())

	require.NoError(t, c.Down("immediate"))
	_, err := pgx.Connect(ctx, c.URL())
	require.Error(t, err, "the server is down")
	require.NoError(t, c.Up())
	require.Equal(t, 2, count())
	require.Error(t, c.Down("sideways"), "an unknown mode is refused")
	c.Stop()
	c.Stop()
}
