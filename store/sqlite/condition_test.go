package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// TestConditionBusy: a write meeting another process's write transaction past the busy timeout is
// "busy" (database busy), not the generic "unavailable", and is still IsUnavailable for the HTTP
// API; an error of the request's own is not named.
func TestConditionBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	s := openAt(t, path, WithBusyTimeout(100*time.Millisecond))

	// Another process's connection, as far as the store can tell, holding the write lock.
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	_, err = s.Insert(ctx, []*store.InsertParams{{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: []byte(`[1]`),
		State: store.StateAvailable, MaxAttempts: 3}})
	require.Error(t, err)
	require.True(t, store.IsUnavailable(s, err), "%v", err)
	c := store.ConditionOf(s, err)
	require.Equal(t, store.ConditionBusy, c, "%v", err)
	require.True(t, c.Reachable())
	require.Contains(t, c.Message(), "database busy")

	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.Equal(t, store.ConditionError, store.ConditionOf(s, sql.ErrNoRows))
}
