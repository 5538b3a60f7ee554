package sqlite

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

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

	var undo func()
	if os.Geteuid() == 0 {
		// A read-only bind mount of the directory on itself: what the file system says of the path
		// from now on is what a read-only remount would say.
		if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("cannot bind-mount as root: %v: %s", err, out)
			}
			t.Skipf("cannot bind-mount here (root without CAP_SYS_ADMIN?): %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		out, err := exec.Command("mount", "-o", "remount,bind,ro", dir).CombinedOutput()
		require.NoError(t, err, string(out))
		undo = func() {
			out, err := exec.Command("umount", dir).CombinedOutput()
			require.NoError(t, err, string(out))
		}
	} else {
		require.NoError(t, os.Chmod(path, 0o444))
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		undo = func() {
			require.NoError(t, os.Chmod(dir, 0o755))
			require.NoError(t, os.Chmod(path, 0o644))
		}
	}
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
