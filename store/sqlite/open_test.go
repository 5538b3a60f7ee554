package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestOpenWaitsForAnotherWritersLock: Open of a file not yet in WAL mode, whose write lock another
// connection holds (another process creating the same new file, or an application writing its
// rollback-journal database), waits for the lock up to the busy timeout instead of failing at once,
// and fails with SQLITE_BUSY once the timeout runs out.
func TestOpenWaitsForAnotherWritersLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// lockNewFile creates the file at path from a plain connection (another process's, as far as the
	// store can tell) and returns that connection inside a write transaction.
	lockNewFile := func(t *testing.T, path string) *sql.Conn {
		other, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Close() })
		conn, err := other.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, "CREATE TABLE app_orders (id INTEGER PRIMARY KEY)")
		require.NoError(t, err)
		return conn
	}

	t.Run("LockReleasedWithinTimeout", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "new.db")
		conn := lockNewFile(t, path)
		released := make(chan error, 1)
		go func() {
			time.Sleep(500 * time.Millisecond) // holds the lock while Open starts; far below the 10 s timeout
			_, err := conn.ExecContext(ctx, "COMMIT")
			released <- err
		}()

		s, err := Open(ctx, path)
		require.NoError(t, <-released)
		require.NoError(t, err, "Open must wait for the other writer's lock")
		t.Cleanup(func() { _ = s.Close() })
		require.NoError(t, s.Migrate(ctx))
		_, err = s.Insert(ctx, params("q", 1))
		require.NoError(t, err)
		var n int
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM app_orders`).Scan(&n),
			"the other writer's table must be there")
		var mode string
		require.NoError(t, s.DB().QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
		require.Equal(t, "wal", mode)
	})

	t.Run("LockHeldPastTimeout", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "new.db")
		lockNewFile(t, path)
		s, err := Open(ctx, path, WithBusyTimeout(100*time.Millisecond))
		if err == nil {
			_ = s.Close()
		}
		require.ErrorContains(t, err, "database is locked")
		require.True(t, (&Store{}).Unavailable(err), "a lock held past the busy timeout is unavailability: %v", err)
	})
}

// TestOpenAfterFileDeletedOrReplaced: Open of a path whose file was deleted or replaced (a backup
// restored) while a Store of this process still has the old file open opens the file now at the
// path, not the old one: what it acknowledges is in the database at the path. The old Store keeps
// the old file.
func TestOpenAfterFileDeletedOrReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	tests := []struct {
		name string
		// change deletes or replaces the database at path (its -wal and -shm with it) and returns
		// the number of jobs of queue "q" the file then at path holds.
		change func(t *testing.T, path string) int
	}{
		{"Deleted", func(t *testing.T, path string) int {
			removeDatabase(t, path)
			return 0
		}},
		{"ReplacedByBackup", func(t *testing.T, path string) int {
			backup := filepath.Join(t.TempDir(), "backup.db")
			b := openAt(t, backup)
			_, err := b.Insert(ctx, params("q", 2))
			require.NoError(t, err)
			require.NoError(t, b.Close()) // the last close folds the log into the file
			removeDatabase(t, path)
			require.NoError(t, os.Rename(backup, path))
			return 2
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "jobs.db")
			old := openAt(t, path) // a long-lived Store (a dashboard, a client) in this process
			_, err := old.Insert(ctx, params("q", 3))
			require.NoError(t, err)

			want := tt.change(t, path)

			s := openAt(t, path)
			jobs, err := s.Insert(ctx, params("q", 1))
			require.NoError(t, err)
			require.Equal(t, want+1, countJobs(t, s), "the Store opened now sees the file at the path")
			require.Equal(t, 3, countJobs(t, old), "the old Store keeps the old file")

			// Another process reading the file at the path finds the acknowledged job.
			other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
			require.NoError(t, err)
			t.Cleanup(func() { _ = other.Close() })
			var n int
			require.NoError(t, other.QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs WHERE id = ?`, jobs[0].ID).Scan(&n))
			require.Equal(t, 1, n, "acknowledged job %s is not in the database at %s", jobs[0].ID, path)
		})
	}
}

// removeDatabase deletes the database at path with its -wal and -shm files.
func removeDatabase(t *testing.T, path string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		require.NoError(t, os.Remove(path+suffix))
	}
}

// countJobs returns the number of jobs of queue "q" in s.
func countJobs(t *testing.T, s *Store) int {
	t.Helper()
	qs, err := s.ListQueues(context.Background())
	require.NoError(t, err)
	for _, q := range qs {
		if q.Name == "q" {
			var n int
			for _, c := range q.Counts {
				n += int(c)
			}
			return n
		}
	}
	return 0
}

// TestCloseStopsFileGoroutines: closing the last Store on a file stops every goroutine its handles
// started. Not parallel, so that no other test's goroutines come and go meanwhile.
func TestCloseStopsFileGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	for range 2 { // two Stores sharing the file's handles
		s, err := Open(ctx, path)
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		_, err = s.Insert(ctx, params("q", 1))
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Close()) }()
	}
}
