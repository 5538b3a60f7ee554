package pronto

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pronto-jobs/pronto/internal/txend"
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

	// endProbe, set by the insert, reads on the caller's goroutine what telling later whether the
	// transaction ended needs, and returns the function that tells from any goroutine; ok false when
	// it cannot be told (see holdUntilTxEnds).
	endProbe func(ctx context.Context) (ended func(context.Context) (bool, error), ok bool)
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

// txEndPollMax bounds the pause between two looks at whether an application's transaction holding
// counted jobs ended: its room comes back within about that long after a rollback.
const txEndPollMax = 250 * time.Millisecond

// holdUntilTxEnds keeps what the queue bounds and the tenant limits counted for ps, just inserted
// into the application's transaction tx, in flight until tx ends: a depth read sees the jobs only once
// tx commits, and never after a rollback. It runs on the caller's goroutine, right after the insert,
// and only for an insert the bounds counted: other inserts into a transaction pay nothing.
//
// When the transaction's end cannot be told (a store wrapped so that its pool is out of reach, a
// failed read of the transaction's id), the jobs are held until they are seen committed, or
// commitWatchMax: a rollback then holds their room that long.
func (c *Client) holdUntilTxEnds(ctx context.Context, tx *appTx, ps []*store.InsertParams) {
	depths, tenants := c.holdDepths(ps), c.holdTenants(ps)
	release := func() {
		if depths != nil {
			depths()
		}
		if tenants != nil {
			tenants()
		}
	}
	if depths == nil && tenants == nil {
		return
	}
	if tx.endProbe != nil {
		if ended, ok := tx.endProbe(ctx); ok {
			if ended == nil { // nothing written: nothing to wait for
				release()
				return
			}
			c.watchTxEnd(ended, 0, release)
			return
		}
	}
	if tx.newJob() == "" { // no new job: nothing a commit would make visible
		release()
		return
	}
	c.watchTxEnd(func(ctx context.Context) (bool, error) { return tx.probe(ctx), nil }, commitWatchMax, release)
}

// watchTxEnd runs release from a goroutine once ended reports the application's transaction ended,
// limit (0: none) passed, or the client stops; at once when it is stopped already. A failed look
// is tried again: the jobs stay counted meanwhile, so that a bound is met early, never late.
func (c *Client) watchTxEnd(ended func(context.Context) (bool, error), limit time.Duration, release func()) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		release()
		return
	}
	c.commitWatches.Add(1) // Stop waits for them, as for afterCommit's
	c.mu.Unlock()
	go func() {
		defer c.commitWatches.Done()
		defer release()
		var deadline <-chan time.Time
		if limit > 0 {
			t := time.NewTimer(limit)
			defer t.Stop()
			deadline = t.C
		}
		pause := time.NewTimer(time.Millisecond)
		defer pause.Stop()
		for wait := time.Millisecond; ; wait = min(2*wait, txEndPollMax) {
			select {
			case <-c.commitWatch.Done():
				return
			case <-deadline:
				return
			case <-pause.C:
			}
			ctx, cancel := context.WithTimeout(c.commitWatch, relayTimeout)
			done, err := ended(ctx)
			cancel()
			if done {
				return
			}
			if err != nil && c.commitWatch.Err() == nil {
				c.cfg.Logger.Debug("pronto: looking whether an application transaction ended failed; its jobs stay counted against their bounds", "error", err)
			}
			pause.Reset(min(2*wait, txEndPollMax))
		}
	}()
}

// pgxTxEnd reads the id of tx, the application's pgx transaction, and returns how to tell on the
// store's pool whether tx ended; nil (and true) when tx wrote nothing, false when that cannot be
// told (the store keeps its pool to itself, or the read failed).
func (c *Client) pgxTxEnd(ctx context.Context, tx pgx.Tx) (func(context.Context) (bool, error), bool) {
	ps, ok := c.store.(interface{ Pool() *pgxpool.Pool })
	if !ok {
		return nil, false
	}
	id, err := txend.PgxID(ctx, tx)
	if err != nil {
		c.cfg.Logger.Warn("pronto: reading the id of an application transaction failed; its jobs count against their bounds until seen committed", "error", err)
		return nil, false
	}
	if id == "" {
		return nil, true
	}
	pool := ps.Pool()
	return func(ctx context.Context) (bool, error) { return txend.PgxEnded(ctx, pool, id) }, true
}
