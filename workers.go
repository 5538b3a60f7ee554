package pronto

import (
	"context"
	"errors"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// WorkerRecord is an OJS worker as the servers last heard from it (ojs-admin-api.md 9): its id,
// queues, first and last contact, and the directive its next heartbeat answers.
type WorkerRecord = store.Worker

// ErrNoWorkerRecords is returned by the worker methods when the client's store keeps no worker
// records (it does not implement store.WorkerStore).
var ErrNoWorkerRecords = errors.New("pronto: the store keeps no worker records")

func (c *Client) workerStore() (store.WorkerStore, error) {
	ws, ok := c.store.(store.WorkerStore)
	if !ok {
		return nil, ErrNoWorkerRecords
	}
	return ws, nil
}

// WorkerList returns the records of the OJS workers that fetched or heartbeated through a server on
// this store, by id. pronto clients' own workers have no record.
func (c *Client) WorkerList(ctx context.Context) ([]WorkerRecord, error) {
	ws, err := c.workerStore()
	if err != nil {
		return nil, err
	}
	out, err := ws.ListWorkers(ctx)
	if err != nil {
		return nil, fmt.Errorf("pronto: list workers: %w", err)
	}
	return out, nil
}

// WorkerDirect gives OJS worker id a directive, answered by its next heartbeat through any server:
// store.WorkerQuiet (stop fetching, finish the jobs held), store.WorkerTerminate, or "" to clear
// it. It returns an error matching ErrNotFound for a worker without a record.
func (c *Client) WorkerDirect(ctx context.Context, id, directive string) error {
	switch directive {
	case "", store.WorkerQuiet, store.WorkerTerminate:
	default:
		return invalidf("worker directive %q: must be %q, %q or empty", directive, store.WorkerQuiet, store.WorkerTerminate)
	}
	ws, err := c.workerStore()
	if err != nil {
		return err
	}
	if err := ws.SetWorkerDirective(ctx, id, directive); err != nil {
		return wrapOp(fmt.Sprintf("worker %s", id), err)
	}
	return nil
}
