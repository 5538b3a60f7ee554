package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWalGateStuckCheckpointer: a checkpointer of another process that holds the intent lock and
// never goes on (a process stopped by SIGSTOP or a debugger while it checkpoints) holds this
// process's reads back once, at most walGateReadWait, together: reads that start together are not
// made to wait in turn (2, 4, 6 s), and the reads after are not held back again while that
// checkpointer stays stuck. Once it lets go, reads take the read lock again, so that the next
// checkpoint holds them back.
func TestWalGateStuckCheckpointer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)
	ok, err := a.walGate().ck.tryLock(gateIntent, true) // a stuck in its checkpoint
	require.NoError(t, err)
	require.True(t, ok)

	const n = 3
	conns := make([]*gatedConn, n)
	entered := make(chan error, n)
	for i := range conns {
		conns[i] = &gatedConn{}
		go func() {
			// Each read's own bound, with room to spare; one waiting for the others in turn
			// needs twice walGateReadWait or more.
			rctx, cancel := context.WithTimeout(ctx, walGateReadWait+walReadPauseWait)
			defer cancel()
			entered <- b.enter(rctx, conns[i])
		}()
	}
	for range n {
		require.NoError(t, <-entered, "a read waited for the stuck checkpointer longer than walGateReadWait")
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	c := &gatedConn{}
	require.NoError(t, b.enter(done, c), "a read waits again for the checkpointer it waited out")
	b.leave(c)

	require.NoError(t, a.walGate().ck.unlock(gateIntent))
	for _, c := range conns {
		b.leave(c)
	}
	require.Eventually(t, func() bool {
		c := &gatedConn{}
		require.NoError(t, b.enter(ctx, c))
		defer b.leave(c)
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.xRead
	}, 10*time.Second, time.Millisecond, "once the checkpointer lets go, reads take the read lock again")
}

// TestWalGateStuckCheckpointerOwnPause: a read whose wait for another process's stuck checkpointer
// runs out while a checkpoint of its own process holds reads back waits for that one to resume: it
// does not join the reads the own checkpoint has waited out.
func TestWalGateStuckCheckpointerOwnPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)
	ok, err := a.walGate().ck.tryLock(gateIntent, true) // a stuck in its checkpoint
	require.NoError(t, err)
	require.True(t, ok)

	c := &gatedConn{}
	entered := make(chan error, 1)
	go func() { entered <- b.enter(ctx, c) }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.acquiring != nil
	}, 10*time.Second, time.Millisecond)
	resume, err := b.pause(ctx, time.Minute) // b's own checkpoint: no read running yet
	require.NoError(t, err)

	var running int // b's reads running once the wait ran out
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		running = len(b.running)
		return b.xSkip
	}, 10*time.Second, time.Millisecond, "the read's wait for the stuck checkpointer ran out")
	require.Zero(t, running, "a read entered while its own process's checkpoint held reads back")
	resume()
	require.NoError(t, <-entered)
	b.leave(c)
}
