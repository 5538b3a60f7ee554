package pronto

import (
	"context"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// appTxKey marks the context of an insert into the application's transaction (InsertTx,
// InsertSQLTx).
type appTxKey struct{}

// appTx is what the insert middleware may need of such an insert: probe reports whether one of the
// inserted jobs is visible outside the transaction yet (it committed).
type appTx struct {
	c     *Client
	probe func(ctx context.Context) bool

	mu sync.Mutex
	// probeID is the job probe looks for, chosen by the store write; "" when it stored no new job.
	probeID string
	// onCommit is what AfterInsertCommit deferred until the commit; done is set once the insert
	// returned and the list was handed to the commit watch.
	onCommit []func()
	done     bool
}

// newAppTx returns the appTx of an insert into the application's transaction, and the function
// the insert calls with its rows to choose the job its probe looks for.
func (c *Client) newAppTx() (*appTx, func(rows []*store.Job)) {
	tx := &appTx{c: c}
	tx.probe = func(ctx context.Context) bool {
		id := tx.newJob()
		if id == "" {
			return false
		}
		_, err := c.store.GetJob(ctx, id)
		return err == nil // not there yet, or not known (an error): look again
	}
	return tx, func(rows []*store.Job) {
		for _, j := range rows {
			if !j.Duplicate { // a job stored before is visible already
				tx.mu.Lock()
				tx.probeID = j.ID
				tx.mu.Unlock()
				return
			}
		}
	}
}

// newJob returns the id of a job the insert stored, "" when it stored none.
func (tx *appTx) newJob() string {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return tx.probeID
}

// AfterInsertCommit runs fn once the jobs of the insert whose context is ctx are committed. Insert
// middleware calls it, after next returns, for what an insert that rolls back must not do: count
// the jobs (promexport does), tell other systems of them.
//
// Outside an application transaction (Insert, InsertMany, ...) the jobs are committed when next
// returns, and fn runs at once, before AfterInsertCommit returns. Inside InsertTx, InsertManyTx,
// InsertSQLTx or InsertManySQLTx it runs from another goroutine once the client sees the
// transaction committed (it reads one of the new jobs back, within about as long after the commit as
// the commit came after the insert); never when the transaction rolls back, nor when the client is
// stopped or a minute passes first. An insert that stored no new job (its unique jobs all met their
// keys' holders) runs fn at once: it added nothing a rollback could take away.
func AfterInsertCommit(ctx context.Context, fn func()) {
	tx, _ := ctx.Value(appTxKey{}).(*appTx)
	if tx == nil {
		fn()
		return
	}
	tx.mu.Lock()
	if !tx.done {
		tx.onCommit = append(tx.onCommit, fn)
		tx.mu.Unlock()
		return
	}
	tx.mu.Unlock()
	// Called after the insert returned (from a goroutine of the middleware): a watch of its own.
	tx.runAfterCommit([]func(){fn})
}

// inserted ends the insert: what AfterInsertCommit deferred and then rep, when not nil, run once
// the transaction commits, from one watch.
func (tx *appTx) inserted(rep func()) {
	tx.mu.Lock()
	fns := tx.onCommit
	tx.onCommit, tx.done = nil, true
	tx.mu.Unlock()
	if rep != nil {
		fns = append(fns, rep)
	}
	tx.runAfterCommit(fns)
}

// runAfterCommit runs fns once the transaction commits (see AfterInsertCommit).
func (tx *appTx) runAfterCommit(fns []func()) {
	switch {
	case len(fns) == 0:
	case tx.newJob() == "": // no new job: nothing to wait for, nor to take back
		for _, fn := range fns {
			fn()
		}
	default:
		tx.c.afterCommit(tx.probe, func() {
			for _, fn := range fns {
				fn()
			}
		})
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
