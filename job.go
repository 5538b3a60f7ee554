package pronto

import (
	"github.com/pronto-jobs/pronto/store"
)

// JobArgs is implemented by the args struct of every typed job. Kind names the job type; it must be
// a dot-separated OJS type name whose segments match [a-z][a-z0-9_-]* ("email.send", "report_build"),
// so that a job inserted from Go can be worked by an OJS worker in any language and the other way round.
//
// The struct is stored as JSON, as the one element of the job's OJS args array.
type JobArgs interface {
	Kind() string
}

// JobArgsWithInsertOpts is implemented by args that carry default insert options for their kind.
// Options passed to Insert override them field by field.
type JobArgsWithInsertOpts interface {
	JobArgs
	InsertOpts() InsertOpts
}

// JobRow is a stored job as every client and store sees it: the OJS job model (id, type as Kind,
// queue, args, meta, priority, state, attempt, max attempts, error history, result, timestamps).
type JobRow = store.Job

// AttemptError is one entry of a job's error history.
type AttemptError = store.AttemptError

// Job is a typed job handed to a Worker: the stored row plus its args decoded into T.
type Job[T JobArgs] struct {
	*JobRow
	// Args is the job's args decoded into the worker's type. It shadows JobRow.Args (the raw JSON array).
	Args T
}

// State is a job's lifecycle state: the eight states of the OJS core specification.
type State = store.State

// The eight job states. Completed, Cancelled and Discarded are terminal.
const (
	StateScheduled = store.StateScheduled
	StateAvailable = store.StateAvailable
	StatePending   = store.StatePending
	StateActive    = store.StateActive
	StateCompleted = store.StateCompleted
	StateRetryable = store.StateRetryable
	StateCancelled = store.StateCancelled
	StateDiscarded = store.StateDiscarded
)
