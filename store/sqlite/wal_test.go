package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestWALBoundedUnderConstantReaders: during a long drain with constant readers (the dashboard, HTTP
// GETs, other clients' reads), the -wal file stays bounded: SQLite's automatic checkpoint cannot
// restart the log while readers keep starting on it, so the store forces a checkpoint that does.
func TestWALBoundedUnderConstantReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "drain.db")
	s := openAt(t, path)

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				_, _ = s.ListQueues(ctx)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	// Twice the size at which the store checkpoints: without the checkpoint this drain (2,400 jobs
	// of 2 KB) leaves a log of about 30 MB.
	const bound = 2 * walCheckpointBytes
	maxWAL := drainRounds(t, s, path, 12)
	db, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("largest WAL %d bytes, database %d bytes", maxWAL, db.Size())
	require.LessOrEqual(t, maxWAL, int64(bound),
		"the WAL grew to %d bytes (database %d bytes) during the drain: it is never checkpointed back", maxWAL, db.Size())
}

// drainRounds inserts 200 jobs of 2 KB in queue q of s, claims and completes them all, rounds
// times, and returns the largest size of the -wal file beside path seen after a round.
func drainRounds(t *testing.T, s *Store, path string, rounds int) int64 {
	t.Helper()
	ctx := context.Background()
	var maxWAL int64
	pad := json.RawMessage(`[{"blob":"` + strings.Repeat("x", 2000) + `"}]`) // larger rows: fewer rounds
	for range rounds {
		ps := params("q", 200)
		for _, p := range ps {
			p.Args = pad
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
		for {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			if len(jobs) == 0 {
				break
			}
			cs := make([]store.Completion, len(jobs))
			for i, j := range jobs {
				cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
			}
			_, err = s.Finish(ctx, cs)
			require.NoError(t, err)
		}
		if fi, err := os.Stat(path + "-wal"); err == nil {
			maxWAL = max(maxWAL, fi.Size())
		}
	}
	return maxWAL
}

// TestLongReadNeverStallsOtherReads: while one read of this process runs long (a big count or
// export, an open read transaction), the other reads go on on the idle reader connections, though
// the log passes the checkpoint size and writes keep asking for a checkpoint; once the long read
// ends, the log is checkpointed and restarted.
func TestLongReadNeverStallsOtherReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "long-read.db")
	s := openAt(t, path, WithReadConns(2), WithBusyTimeout(2*time.Minute))

	conn, err := s.r.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var n int
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM pronto_jobs`).Scan(&n))

	// Writes past the checkpoint size (the open read keeps the log from restarting).
	pad := json.RawMessage(`[{"blob":"` + strings.Repeat("x", 4000) + `"}]`)
	for range 14 {
		ps := params("q", 200)
		for _, p := range ps {
			p.Args = pad
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
	}
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(walCheckpointBytes))

	for i := range 20 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.ListQueues(rctx)
		cancel()
		require.NoError(t, err, "read %d, with a reader connection idle, stalled behind the checkpoint waiting for the long read", i)
		_, err = s.Insert(ctx, params("q", 1)) // the writes that keep asking for a checkpoint
		require.NoError(t, err)
	}

	require.NoError(t, tx.Rollback())
	require.Eventually(t, func() bool {
		_, err := s.Insert(ctx, params("q", 1))
		require.NoError(t, err)
		fi, err := os.Stat(path + "-wal")
		// Restarted by the checkpoint (truncated) or by a write (cut to journal_size_limit).
		return err == nil && fi.Size() <= walCheckpointBytes
	}, time.Minute, 50*time.Millisecond, "the log is restarted once the long read ends")
}
