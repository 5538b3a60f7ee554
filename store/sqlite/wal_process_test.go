package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperReader reads the store constantly, on four goroutines, until killed: the dashboard or HTTP
// GETs of another process, each a read transaction of two counts, so that the four overlap and the
// log is seldom without a reader. It prints "reading" once its first reads have returned. Each read
// is short, even under the race detector (a read past walReadPauseWait, such as a scan of every job
// there, is a long read, waited for once only by design).
func helperReader() int {
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(pathEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	read := func() error {
		tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pronto_queues").Scan(&n); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pronto_jobs WHERE state = 'available'").Scan(&n); err != nil {
			return err
		}
		return nil
	}
	var once sync.Once
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				if err := read(); err != nil {
					fmt.Fprintln(os.Stderr, "reader:", err)
					os.Exit(1)
				}
				once.Do(func() { fmt.Println("reading") })
			}
		})
	}
	wg.Wait()
	return 0
}

// TestWALUnderAnotherProcessReaders runs the drain of TestWALBoundedUnderConstantReaders (three
// times as long) with the constant reads made by another pronto process on the file, and checks that
// the log stays bounded: the processes' read gates cooperate through the gate file (walgate.go), so
// a checkpoint holds the other process's new reads back too. Without that cooperation the log
// reached 22 to 75 MB on a quiet machine, restarted only when those reads happened to leave a gap.
// It also checks that the log is restarted by the writes after the other process stops.
func TestWALUnderAnotherProcessReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "drain.db")
	s := openAt(t, path)

	cmd := helperCmd(t, "reader", pathEnv+"="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "reading\n", line)

	// The log's size is sampled while the drain runs, not only between its rounds.
	var sampled atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > sampled.Load() {
				sampled.Store(fi.Size())
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	maxWAL := drainRounds(t, s, path, 40)
	close(stop)
	wg.Wait()
	maxWAL = max(maxWAL, sampled.Load())
	db, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("largest WAL %d bytes with another process reading, database %d bytes", maxWAL, db.Size())
	// Three times the size at which the store checkpoints: the log passes it by what is written
	// while a checkpoint waits for the reads to pause. Without the gate file, 50 to 104 MB.
	if walGateSupported {
		require.LessOrEqual(t, maxWAL, int64(3*walCheckpointBytes),
			"the WAL grew to %d bytes (database %d bytes) during the drain while another process read: "+
				"that process's reads were not held back for the checkpoint", maxWAL, db.Size())
	}

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool {
		_, err := s.Insert(ctx, params("q", 1))
		require.NoError(t, err)
		fi, err := os.Stat(path + "-wal")
		// Restarted by the checkpoint (truncated) or by a write (cut to journal_size_limit).
		return err == nil && fi.Size() <= walCheckpointBytes
	}, time.Minute, 50*time.Millisecond, "the log is restarted once the other process stops reading")
}
