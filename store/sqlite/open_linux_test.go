package sqlite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs of size (mount's spelling, "4m") on dir, unmounted at cleanup, and
// skips the test where this process may not mount, except in CI, where it fails.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" { // CI runs as root (.ci/run): there, not running it is a failure
			t.Fatalf("cannot mount a tmpfs: %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs here (run as root to test a full disk and a read-only directory): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
}

// TestOpenNamesUnwritableDirectory: a database in a directory this process cannot write (a read-only
// mount, or one without write permission) cannot be opened in WAL mode, since SQLite must create the
// -wal and -shm files beside it; Open's error says the directory is not writable, not only SQLite's
// "unable to open database file" about a file that exists and is readable.
func TestOpenNamesUnwritableDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	root := os.Geteuid() == 0
	if root { // root writes whatever the permissions say: make the file system read-only instead
		mountTmpfs(t, dir, "4m")
	}
	path := filepath.Join(dir, "jobs.db")
	s := openAt(t, path)
	_, err := s.Insert(ctx, params("q", 1))
	require.NoError(t, err)
	require.NoError(t, s.Close()) // the last close removes the -wal and -shm files

	if root {
		out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput()
		require.NoError(t, err, string(out))
	} else {
		require.NoError(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}

	_, err = Open(ctx, path)
	require.Error(t, err)
	msg := strings.ReplaceAll(err.Error(), dir, "DIR") // the temporary path holds the test's name
	require.Contains(t, msg, `directory "DIR" is not writable`)
	require.Contains(t, msg, "jobs.db-wal and jobs.db-shm")
}

// TestOpenNamesFullDisk: Open on a file system with almost no room left says the disk may be full,
// also where SQLite reports only a "disk I/O error" (the -shm file failing to grow).
func TestOpenNamesFullDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, free := range []int64{0, 8 << 10} {
		dir := t.TempDir()
		mountTmpfs(t, dir, "1m")
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(dir, &st))
		avail := int64(st.Bavail) * st.Bsize
		require.NoError(t, os.WriteFile(filepath.Join(dir, "filler"), make([]byte, avail-free), 0o600))

		s, err := Open(ctx, filepath.Join(dir, "jobs.db"))
		if err == nil {
			_ = s.Close()
		}
		require.ErrorContains(t, err, "is the disk or a quota full?", "%d bytes free", free)
	}
}
