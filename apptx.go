package pronto

import (
	"context"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// appTxKey marks the context of an insert into the application's transaction (InsertTx,
// InsertSQLTx).
type appTxKey struct{}

// appTx is what the insert middleware may need of such an insert: probe reports whether one of the
// inserted jobs is visible outside the transaction yet (it committed).
type appTx struct {
	probe func(ctx context.Context) bool
}

// newAppTx returns the appTx of an insert into the application's transaction, and the function
// the insert calls with its rows to choose the job its probe looks for.
func (c *Client) newAppTx() (*appTx, func(rows []*store.Job)) {
	var probeID string
	tx := &appTx{probe: func(ctx context.Context) bool {
		if probeID == "" {
			return false
		}
		_, err := c.store.GetJob(ctx, probeID)
		return err == nil // not there yet, or not known (an error): look again
	}}
	return tx, func(rows []*store.Job) {
		for _, j := range rows {
			if !j.Duplicate { // a job stored before is visible already
				probeID = j.ID
				return
			}
		}
	}
}

// commitWatchMax bounds how long afterCommit waits for a transaction to commit; what it would have
// done is then left undone (a job committed later is found by the workers' poll).
const commitWatchMax = time.Minute

// afterCommit runs fn from a goroutine once probe sees the application's transaction committed. It
// gives up after commitWatchMax, on a rollback (probe never sees it), or when the client stops.
func (c *Client) afterCommit(probe func(context.Context) bool, fn func()) {
	// Counted under the client's lock, which Stop takes to mark the client stopped before it waits:
	// no watch is added while Stop waits, and none starts after it.
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.commitWatches.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.commitWatches.Done()
		deadline := time.NewTimer(commitWatchMax)
		defer deadline.Stop()
		// Pauses double without bound, so a rolled-back transaction costs at most 17 reads, and a
		// commit is seen at most about as long after it as it came after the insert.
		for wait := time.Millisecond; ; wait *= 2 {
			select {
			case <-c.commitWatch.Done():
				return
			case <-deadline.C:
				return
			case <-time.After(wait):
			}
			ctx, cancel := context.WithTimeout(c.commitWatch, relayTimeout)
			seen := probe(ctx)
			cancel()
			if seen {
				fn()
				return
			}
		}
	}()
}
