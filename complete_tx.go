package pronto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pronto-jobs/pronto/store"
)

// Atomic processing: a worker whose effects are rows in the same database as its jobs can complete
// its job in the transaction that writes them. Either both commit or neither does, so a crash can
// never leave the effects written and the job to run again, nor the job completed and the effects
// lost. Without it (the default, "staged" processing) the outcome is written after Work returns, in
// a transaction of its own.

// CompleteTx marks the job of the running Work call completed, with the result recorded so far
// (RecordResult), inside the application's pgx transaction tx, on the PostgreSQL store. ctx is the
// context Work was given. The job completes when tx commits, and not if it rolls back.
//
// It fails with an error matching ErrJobLost (or ErrJobCancelled) when the run no longer holds the
// job: its lease ran out and the job was taken back, or it was cancelled. The application must then
// roll tx back. Once tx has committed, the client writes no other outcome for this run, whatever
// Work returns; if tx rolled back, Work's return decides as usual.
func CompleteTx(ctx context.Context, tx pgx.Tx) error {
	h, err := holderOf(ctx, "CompleteTx")
	if err != nil {
		return err
	}
	tc, ok := h.client.store.(store.PgxTxCompleter)
	if !ok {
		return fmt.Errorf("pronto: CompleteTx: the %T store cannot complete jobs in a pgx transaction: %w", h.client.store, ErrUnsupported)
	}
	return h.completeIn(ctx, func(c store.Completion) (bool, error) { return tc.CompletePgxTx(ctx, tx, c) })
}

// CompleteSQLTx is CompleteTx for a database/sql transaction on the SQLite store's file.
func CompleteSQLTx(ctx context.Context, tx *sql.Tx) error {
	h, err := holderOf(ctx, "CompleteSQLTx")
	if err != nil {
		return err
	}
	tc, ok := h.client.store.(store.SQLTxCompleter)
	if !ok {
		return fmt.Errorf("pronto: CompleteSQLTx: the %T store cannot complete jobs in a database/sql transaction: %w", h.client.store, ErrUnsupported)
	}
	return h.completeIn(ctx, func(c store.Completion) (bool, error) { return tc.CompleteSQLTx(ctx, tx, c) })
}

// holderOf returns the run state of the Work call whose context ctx is.
func holderOf(ctx context.Context, fn string) (*resultHolder, error) {
	h, ok := ctx.Value(resultKey{}).(*resultHolder)
	if !ok || h.client == nil {
		return nil, fmt.Errorf("pronto: %s called outside a job's context", fn)
	}
	return h, nil
}

// completeIn writes the run's completion through write, and remembers that it did.
func (h *resultHolder) completeIn(ctx context.Context, write func(store.Completion) (bool, error)) error {
	row := h.run.row
	if cause := context.Cause(ctx); errors.Is(cause, ErrJobLost) || errors.Is(cause, ErrJobCancelled) {
		return fmt.Errorf("pronto: complete job %s in a transaction: this run no longer holds it: %w", row.ID, cause)
	}
	h.mu.Lock()
	result := h.raw
	h.mu.Unlock()
	remove := h.client.removesCompleted(row.Queue)
	applied, err := write(store.Completion{ID: row.ID, Attempt: row.Attempt, Token: row.ClaimToken,
		State: store.StateCompleted, Result: result, Remove: remove})
	if err != nil {
		return fmt.Errorf("pronto: complete job %s in a transaction: %w", row.ID, err)
	}
	if !applied {
		cause := ErrJobLost
		if j, err := h.client.store.GetJob(ctx, row.ID); err == nil && j.State == store.StateCancelled {
			cause = ErrJobCancelled
		}
		return fmt.Errorf("pronto: complete job %s in a transaction: this run no longer holds it: %w", row.ID, cause)
	}
	h.mu.Lock()
	h.completedInTx = true
	h.removedInTx = h.removedInTx || remove
	h.mu.Unlock()
	return nil
}

// settledInTx reports whether a CompleteTx of the run rj committed: the job is completed on rj's
// attempt. Only rj's claim could have completed it on that attempt, as the claim token fenced it.
// removed says that the completion asked to remove the job (RemoveCompleted): a job that is gone
// then was removed by it, as a job still held by rj (its transaction rolled back) cannot be
// deleted. Only a lease lost after a rollback, and the job's next attempt completed and removed
// before Work returned, could also leave it gone; that run reports its own completion, and this
// one reports it once more.
//
// A read that fails for a reason that may pass (store.IsRefused: an outage, a lock timeout) is tried
// again with backoff until the client stops its work: writing the outcome Work returned instead
// would be refused for a committed job, and its EventCompleted never reported.
func (c *Client) settledInTx(rj *runningJob, removed bool) bool {
	backoff := 50 * time.Millisecond
	for {
		// Not the work context: a run that returns after Stop cancelled it still reads its job.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		j, err := c.store.GetJob(ctx, rj.row.ID)
		cancel()
		switch {
		case err == nil:
			return j.State == store.StateCompleted && j.Attempt == rj.row.Attempt
		case errors.Is(err, store.ErrNotFound):
			// Writing the outcome again would be refused (no job) and report nothing, though the
			// application's transaction completed it.
			return removed
		case store.IsRefused(c.store, err) || c.workCtx.Err() != nil:
			c.cfg.Logger.Warn("pronto: reading a job completed in a transaction failed; writing the outcome Work returned", jobAttrs(rj.row, "err", err)...)
			return false
		}
		c.cfg.Logger.Warn("pronto: reading a job completed in a transaction failed; retrying", jobAttrs(rj.row, "err", err, "retry_in", backoff)...)
		select {
		case <-c.workCtx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
