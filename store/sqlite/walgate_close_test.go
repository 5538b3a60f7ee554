package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWalGateCloseWhileAcquiring: closing the gate (the last Store's Close) while a read is taking
// its read lock, waiting for another process's checkpointer, lets that read go on. Run with -race:
// the read's fcntl calls used the descriptor's number while Close closed it (a data race, and a
// number another file could have reused).
func TestWalGateCloseWhileAcquiring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := gatePair(t)
	ok, err := a.walGate().ck.tryLock(gateIntent, true)
	require.NoError(t, err)
	require.True(t, ok)

	entered := make(chan error, 1)
	c := &gatedConn{}
	go func() { entered <- b.enter(ctx, c) }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.acquiring != nil
	}, 10*time.Second, time.Millisecond)
	b.closeWalGate()
	require.NoError(t, <-entered)
	b.leave(c)
}
