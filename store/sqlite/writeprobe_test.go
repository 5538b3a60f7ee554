package sqlite

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/pronto-jobs/pronto/internal/testfs"
	"github.com/pronto-jobs/pronto/store"
)

// TestProbeWritableReadOnlyDirectory: a database whose directory becomes read-only while the store
// runs (a read-only mount as root, who ignores file modes; the modes otherwise) answers reads;
// ProbeWritable says it takes no writes (ErrReadOnly, condition read_only), and says nothing again
// once the directory is writable, without a new store.
func TestProbeWritableReadOnlyDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs.db")
	s := openAt(t, path)
	_, err := s.Insert(ctx, params("q", 1))
	require.NoError(t, err)
	require.NoError(t, store.ProbeWritable(ctx, s))

	undo := testfs.MakeReadOnly(t, dir, "jobs.db")
	_, err = s.GetJob(ctx, "00000000-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, store.ErrNotFound, "reads pass")

	err = store.ProbeWritable(ctx, s) // as the server asks it
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.Equal(t, store.ConditionReadOnly, store.ConditionOf(s, err))
	require.True(t, store.IsUnavailable(s, err))

	undo()
	require.NoError(t, store.ProbeWritable(ctx, s), "writable again")
}

// TestProbeWritableReadOnlyConnection: a store whose connections opened the file read-only (as
// SQLite does when it cannot open it for writing) is read-only by SQLite's own word, whatever the
// file's modes say now.
func TestProbeWritableReadOnlyConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, store.ProbeWritable(ctx, s))

	c, err := sqlite.NewConnector((&url.URL{Scheme: "file", Path: s.path}).String() + "?mode=ro")
	require.NoError(t, err)
	ro := sql.OpenDB(c)
	t.Cleanup(func() { _ = ro.Close() })
	shared := s.r
	s.r = ro // this Store's readers only; the file's shared handles are closed with the file
	t.Cleanup(func() { s.r = shared })

	err = store.ProbeWritable(ctx, s)
	require.ErrorIs(t, err, store.ErrReadOnly)
	require.ErrorContains(t, err, "opened read-only")
	require.Equal(t, store.ConditionReadOnly, store.ConditionOf(s, err))
}
