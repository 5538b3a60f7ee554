package pronto

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// MaxBulkIDs is the most job ids one JobCancelMany, JobRetryMany or JobDeleteMany call takes.
const MaxBulkIDs = 1000

// BulkResult is the outcome of a bulk operation on one job id, in the order the ids were given.
type BulkResult struct {
	// ID is the job id as given.
	ID string
	// Job is the job after the operation (for a delete, as it was when deleted); nil when Err is set.
	Job *JobRow
	// Err is why the operation was refused for this job: it matches ErrInvalidArgs for a malformed id,
	// ErrNotFound for an unknown job and ErrInvalidTransition for a job in the wrong state.
	Err error
}

// JobCancelMany cancels each job as JobCancel does, one at a time and in order, and reports every
// job's outcome in its BulkResult; a job that cannot be cancelled does not stop the others. The
// returned error is set only for an empty id list or one longer than MaxBulkIDs (matching
// ErrInvalidArgs; no job is touched), or when ctx ends or the store cannot serve midway (the
// results so far come with it, and the jobs after them were not attempted: a store that is down is
// tried once, not once per id). A job whose row another session holds past the database's
// lock_timeout (or that meets a statement_timeout) fails alone in its BulkResult and the others go
// on; three such jobs in a row stop the operation, as a lock on the whole table would.
func (c *Client) JobCancelMany(ctx context.Context, ids []string) ([]BulkResult, error) {
	return c.bulk(ctx, "cancel", ids, c.JobCancel)
}

// JobRetryMany makes each discarded or cancelled job available again as JobRetry does, one at a time
// and in order; a job in another state gets an error matching ErrInvalidTransition in its BulkResult
// and is left alone. The returned error is as for JobCancelMany.
func (c *Client) JobRetryMany(ctx context.Context, ids []string) ([]BulkResult, error) {
	return c.bulk(ctx, "retry", ids, c.JobRetry)
}

// JobDeleteMany deletes each job that is in a terminal state (completed, cancelled or discarded), one
// at a time and in order. A job in any other state, or a workflow step a pending step still waits
// for (see JobDelete), is left alone and gets an error matching ErrInvalidTransition in its
// BulkResult. The returned error is as for JobCancelMany.
//
// The state is read before the delete, not in the same store operation: a cancelled or discarded job
// that another caller retries in between is deleted although it had become available (a completed
// job has no way out of its state, so it is safe). Its BulkResult then carries the job as it was
// deleted, with that state and no error, so the caller can see it happened.
func (c *Client) JobDeleteMany(ctx context.Context, ids []string) ([]BulkResult, error) {
	return c.bulk(ctx, "delete", ids, c.deleteTerminal)
}

// deleteTerminal deletes a job only if it is in a terminal state.
func (c *Client) deleteTerminal(ctx context.Context, id string) (*JobRow, error) {
	j, err := c.JobGet(ctx, id)
	if err != nil {
		return nil, err
	}
	switch j.State {
	case StateCompleted, StateCancelled, StateDiscarded:
		return c.JobDelete(ctx, id)
	}
	return nil, fmt.Errorf("pronto: delete job %s: only completed, cancelled and discarded jobs are deleted in bulk: %w",
		id, &TransitionError{JobID: id, Operation: "delete", From: j.State})
}

// bulk applies op to every id in order, collecting each outcome.
func (c *Client) bulk(ctx context.Context, name string, ids []string, op func(context.Context, string) (*JobRow, error)) ([]BulkResult, error) {
	if len(ids) == 0 {
		return nil, invalidf("bulk %s: no job ids", name)
	}
	if len(ids) > MaxBulkIDs {
		return nil, invalidf("bulk %s: %d job ids, at most %d", name, len(ids), MaxBulkIDs)
	}
	out := make([]BulkResult, len(ids))
	busy := 0 // jobs in a row that met a lock or statement timeout
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return out[:i], fmt.Errorf("pronto: bulk %s stopped after %d of %d jobs: %w", name, i, len(ids), err)
		}
		j, err := op(ctx, id)
		if store.IsUnavailable(c.store, err) {
			// A lock or statement timeout may be this job's alone (its row held by another session):
			// it fails alone and the others go on. Several in a row point at the table (a migration's
			// lock), where every job after would wait out the same timeout.
			perRequest := store.ConditionOf(c.store, err).PerRequest()
			if perRequest {
				busy++
			}
			if !perRequest || busy >= maxBulkBusyInARow {
				// The store cannot serve: every job after this one would wait out the same failure.
				return out[:i], fmt.Errorf("pronto: bulk %s stopped after %d of %d jobs: %w", name, i, len(ids), err)
			}
		} else {
			busy = 0
		}
		out[i] = BulkResult{ID: id, Job: j, Err: err}
	}
	return out, nil
}

// maxBulkBusyInARow is how many jobs in a row may meet a lock or statement timeout before a bulk
// operation stops, as the dashboard's bulk actions do.
const maxBulkBusyInARow = 3
