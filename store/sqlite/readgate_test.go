package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadGatePause: a checkpoint's pause holds new reads back only once the running ones have
// ended, and never holds them back for a read that outlasts its wait, or that has run for its wait
// already. A read held back that sees its context done gives up with the context's error.
func TestReadGatePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	// heldBack reports whether g holds new reads back: a read with a done context only enters if not.
	heldBack := func(t *testing.T, g *readGate) bool {
		t.Helper()
		c := &gatedConn{}
		err := g.enter(done, c)
		if err == nil {
			g.leave(c)
			return false
		}
		require.ErrorIs(t, err, context.Canceled)
		return true
	}

	t.Run("NoReadRunning", func(t *testing.T) {
		t.Parallel()
		g := newReadGate()
		resume, err := g.pause(ctx, time.Minute)
		require.NoError(t, err)
		require.True(t, heldBack(t, g))
		resume()
		require.False(t, heldBack(t, g), "resume lets reads go on")
	})

	t.Run("WaitsForTheRunningReads", func(t *testing.T) {
		t.Parallel()
		g := newReadGate()
		c := &gatedConn{}
		require.NoError(t, g.enter(ctx, c))
		paused := make(chan error, 1)
		var resume func()
		go func() {
			var err error
			resume, err = g.pause(ctx, time.Minute)
			paused <- err
		}()
		require.Eventually(t, func() bool { return heldBack(t, g) }, 10*time.Second, time.Millisecond,
			"new reads wait while the pause waits for the running one")
		g.leave(c)
		require.NoError(t, <-paused, "the pause has reads once the running one ends")
		require.True(t, heldBack(t, g))
		resume()
		require.False(t, heldBack(t, g))
	})

	t.Run("ReadOutlastingTheWait", func(t *testing.T) {
		t.Parallel()
		g := newReadGate()
		c := &gatedConn{}
		require.NoError(t, g.enter(ctx, c))
		_, err := g.pause(ctx, 10*time.Millisecond)
		require.ErrorIs(t, err, errLongRead)
		require.False(t, heldBack(t, g), "a pause that ran out lets reads go on")
		_, err = g.pause(ctx, 10*time.Millisecond)
		require.ErrorIs(t, err, errLongRead, "a read older than the wait is not waited for again")
		require.False(t, heldBack(t, g))
		g.leave(c)
		resume, err := g.pause(ctx, time.Minute)
		require.NoError(t, err, "once the long read ends, a pause has reads")
		resume()
	})
}
