package store

import (
	"context"
	"time"
)

// Worker is the record of an OJS worker (a process fetching jobs over HTTP) that the servers keep:
// when it was first and last seen, the queues it last fetched from, and the directive an operator
// gave it (ojs-admin-api.md 9).
type Worker struct {
	ID string
	// Queues are the queues of its latest fetch that named any.
	Queues []string
	// FirstSeenAt and LastSeenAt are when a server first and last heard from it (the store's clock).
	FirstSeenAt time.Time
	LastSeenAt  time.Time
	// Directive is what its next heartbeat answers: "" (run), WorkerQuiet or WorkerTerminate.
	Directive string
	// DirectiveAt is when the directive was given (zero without one).
	DirectiveAt time.Time
}

// Worker directives.
const (
	// WorkerQuiet: stop fetching, finish the jobs held.
	WorkerQuiet = "quiet"
	// WorkerTerminate: stop now.
	WorkerTerminate = "terminate"
)

// WorkerStore keeps the worker records. It is optional: a store without it serves no worker
// management (the admin API then lists the workers holding active jobs only).
type WorkerStore interface {
	// TouchWorker records that worker id was heard from now, creating its record if needed, and
	// sets its queues when queues is not empty. It returns the worker's directive.
	TouchWorker(ctx context.Context, id string, queues []string) (directive string, err error)
	// ListWorkers returns every record, by id.
	ListWorkers(ctx context.Context) ([]Worker, error)
	// GetWorker returns one record, or ErrNotFound.
	GetWorker(ctx context.Context, id string) (*Worker, error)
	// SetWorkerDirective sets a worker's directive ("" clears it); ErrNotFound without a record.
	SetWorkerDirective(ctx context.Context, id, directive string) error
	// DeleteWorker removes a record and reports whether there was one.
	DeleteWorker(ctx context.Context, id string) (bool, error)
	// PruneWorkers removes the records last seen before before and returns how many.
	PruneWorkers(ctx context.Context, before time.Time) (int, error)
}
