package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWalGateStoppedReaderProcess: a process stopped (SIGSTOP, Ctrl-Z, a debugger) while it held the
// gate's read lock, with no read running, does not keep checkpoints from restarting the log. Its
// lock guards no data and it cannot answer a checkpointer, so once the wait for it runs out the
// checkpoint is tried anyway, the other processes' reads still held back: SQLite's read marks then
// show that it reads nothing. Before, every checkpoint failed while it stayed stopped, after
// holding every other process's reads back for a second.
func TestWalGateStoppedReaderProcess(t *testing.T) {
	t.Parallel()
	if !walGateSupported {
		t.Skip("no gate file on this platform")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "stopped.db")
	s := openAt(t, path)
	stopped := openWalGate(path)
	require.NotNil(t, stopped)
	t.Cleanup(stopped.close)
	ok, err := stopped.rd.tryLock(gateRead, false)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = s.Insert(ctx, params("q", 10))
	require.NoError(t, err)
	require.NoError(t, s.shared.keeper.checkpoint(ctx), "a stopped process's read lock failed the checkpoint")
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "the checkpoint truncates the log")
}
