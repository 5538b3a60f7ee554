package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatePair opens two read gates on one database's gate file, as two processes would: each has its
// own descriptors, whose locks conflict as two processes' do.
func gatePair(t *testing.T) (a, b *readGate) {
	t.Helper()
	if !walGateSupported {
		t.Skip("no gate file on this platform: checkpoints hold back their own process's reads only")
	}
	path := filepath.Join(t.TempDir(), "gate.db")
	require.NoError(t, os.WriteFile(path, nil, 0o640))
	a, b = newReadGate(), newReadGate()
	for _, g := range []*readGate{a, b} {
		x := openWalGate(path)
		require.NotNil(t, x)
		g.setWalGate(x)
		t.Cleanup(g.closeWalGate)
	}
	fi, err := os.Stat(path + "-pronto-gate")
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "the gate file has the database's permissions")
	return a, b
}

// pauseBoth pauses a's reads and then, through the gate file, the other process's, as
// fileKeeper.checkpoint does.
func pauseBoth(ctx context.Context, a *readGate, wait time.Duration) (func(), error) {
	resume, err := a.pause(ctx, wait)
	if err != nil {
		return nil, err
	}
	resumeOthers, err := a.walGate().pause(ctx, wait)
	if err != nil {
		resume()
		return nil, err
	}
	return func() { resumeOthers(); resume() }, nil
}

// TestWalGateHoldsOtherProcessReads: a checkpoint in one process waits for the reads running in
// another to end, holds that process's new reads back meanwhile and until it resumes, and then
// lets them go on.
func TestWalGateHoldsOtherProcessReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)

	running := &gatedConn{}
	require.NoError(t, b.enter(ctx, running))
	paused := make(chan error, 1)
	var resume func()
	go func() {
		var err error
		resume, err = pauseBoth(ctx, a, time.Minute)
		paused <- err
	}()

	// heldBack reports whether b holds new reads back: a read with a short context then fails.
	heldBack := func() bool {
		c := &gatedConn{}
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := b.enter(sctx, c); err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			return true
		}
		b.leave(c)
		return false
	}
	require.Eventually(t, heldBack, 10*time.Second, time.Millisecond,
		"the other process's new reads wait while the checkpoint waits for its running read")
	select {
	case err := <-paused:
		t.Fatalf("the pause returned (%v) while the other process's read ran", err)
	default:
	}
	b.leave(running)
	require.NoError(t, <-paused, "the pause has the reads once the running one ends")
	require.True(t, heldBack(), "reads are held back until the checkpoint resumes")

	entered := make(chan error, 1)
	go func() {
		c := &gatedConn{}
		err := b.enter(ctx, c)
		if err == nil {
			b.leave(c)
		}
		entered <- err
	}()
	resume()
	require.NoError(t, <-entered, "a read held back goes on once the checkpoint resumes")
	require.False(t, heldBack())
}

// TestWalGateLongReadWaitedForOnce: a read in another process that outlasts a checkpoint's wait
// fails that pause, lets that process's other reads go on, and fails the next pauses at once,
// holding nothing back, until it ends.
func TestWalGateLongReadWaitedForOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)

	long := &gatedConn{}
	require.NoError(t, b.enter(ctx, long))
	_, err := pauseBoth(ctx, a, walReadPauseWait+10*walGateProbe)
	require.ErrorIs(t, err, errLongRead)

	c := &gatedConn{}
	require.NoError(t, b.enter(ctx, c), "the other reads go on")
	b.leave(c)
	_, err = a.walGate().pause(ctx, time.Minute) // a wait the test would notice
	require.ErrorIs(t, err, errLongRead, "a long read is not waited for again")

	b.leave(long)
	require.Eventually(t, func() bool {
		resume, err := pauseBoth(ctx, a, time.Minute)
		if err != nil {
			require.ErrorIs(t, err, errLongRead)
			return false
		}
		resume()
		return true
	}, 10*time.Second, 10*time.Millisecond, "once the long read ends, a pause has the reads")
}

// TestWalGateDeadProcessReleases: a process that goes away with a read running (here, its gate
// file closed, as the kernel closes a dead process's files) holds no checkpoint back.
func TestWalGateDeadProcessReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)
	require.NoError(t, b.enter(ctx, &gatedConn{}))
	b.closeWalGate()
	resume, err := pauseBoth(ctx, a, time.Minute)
	require.NoError(t, err)
	resume()
}
