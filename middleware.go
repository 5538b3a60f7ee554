package pronto

import (
	"context"

	"github.com/pronto-jobs/pronto/store"
)

// JobInsertParams is a job about to be inserted, fully resolved (id, queue, state, encoded args).
// Insert middleware may inspect or change it.
type JobInsertParams = store.InsertParams

// InsertFunc inserts resolved jobs.
type InsertFunc func(ctx context.Context, params []*JobInsertParams) ([]*JobRow, error)

// InsertMiddleware wraps inserts: it may change params, add context, observe or refuse the insert,
// and must call next to proceed.
type InsertMiddleware func(ctx context.Context, params []*JobInsertParams, next InsertFunc) ([]*JobRow, error)

// WorkMiddleware wraps each attempt: it may add context (tracing, logging, metrics), observe the
// outcome, or change the error, and must call next to run the worker. A worker that panics does not
// unwind through the middleware: next returns the panic as a *PanicError (with its stack), so every
// middleware sees it as a failure. The attempt's context tells a cancel or a shutdown apart through
// context.Cause (ErrJobCancelled, ErrJobLost, ErrShutdown).
type WorkMiddleware func(ctx context.Context, job *JobRow, next func(ctx context.Context) error) error
