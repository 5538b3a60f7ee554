package store

import (
	"context"
	"fmt"
	"time"
)

// ClientQueue is one queue a client works, with its worker counts.
type ClientQueue struct {
	Name string `json:"name"`
	// MaxWorkers is the queue's configured number of workers in the client.
	MaxWorkers int `json:"max_workers"`
	// Running counts the jobs of the queue the client was running when it wrote its record.
	Running int `json:"running"`
}

// ClientRecord is a started client's entry in its store's registry of clients: who it is, where it
// runs and what it works. Clients rewrite their record every few seconds; one not rewritten within
// its time to live is gone (crashed, or cut off from the store).
type ClientRecord struct {
	ID string
	// Host and PID name the process (empty and 0 when unknown).
	Host string
	PID  int
	// Version is the pronto version the client runs.
	Version string
	// Queues are the queues the client works, by name; empty for a client that only inserts.
	Queues    []ClientQueue
	StartedAt time.Time
	// SeenAt is when the record was last written, by the store's clock. PutClient sets it.
	SeenAt time.Time
	// Leader is set by ListClients: the client holds the leadership it was asked about.
	Leader bool
}

// ClientRegistry is the part of Store that keeps the records of the clients using it, so that an
// operator (the dashboard, the CLI) sees every live client of the store from any process.
type ClientRegistry interface {
	// PutClient creates or replaces the record of client r.ID, live for ttl from now (the store's
	// clock), and may drop records that expired.
	PutClient(ctx context.Context, r ClientRecord, ttl time.Duration) error
	// RemoveClient deletes the record of client id; a missing record is not an error.
	RemoveClient(ctx context.Context, id string) error
	// ListClients returns the live records in id order, with Leader set on the client holding the
	// live leadership named leader (see Elect), if it has a record.
	ListClients(ctx context.Context, leader string) ([]ClientRecord, error)
}

// IDTimeBound returns the smallest UUIDv7 text of t's millisecond: every job id made at t's
// millisecond or later compares greater (as text and as uuid), every earlier one smaller. No
// UUIDv7 equals it (its version digit is 0), so "id > bound" and "id >= bound" agree.
func IDTimeBound(t time.Time) string {
	ms := max(t.UnixMilli(), 0) & (1<<48 - 1)
	h := fmt.Sprintf("%012x", ms)
	return h[:8] + "-" + h[8:] + "-0000-0000-000000000000"
}

// FinishedSlack is how far past ListParams.FinishedBefore the time in a job's id may lie for the
// job to be listed as finished before it: the bound lets a finish-time window seek the id order
// instead of scanning it, and the slack covers ids chosen by a client whose clock ran ahead.
const FinishedSlack = time.Hour

// IDWindow turns p's cursor and creation-time bounds into the exclusive bounds of the ids a page
// may hold: ids greater than lower and smaller than upper ("" for no bound). The cursor bounds the
// side the page starts from (lower when ascending, upper when descending).
func (p ListParams) IDWindow() (lower, upper string) {
	if !p.CreatedAfter.IsZero() {
		lower = IDTimeBound(p.CreatedAfter)
	}
	if !p.CreatedBefore.IsZero() {
		upper = IDTimeBound(p.CreatedBefore)
	}
	// A job finishes after it was created, so one finished before FinishedBefore has an id from
	// before it too; FinishedSlack allows for a caller's clock that ran ahead when it chose the id.
	if !p.FinishedBefore.IsZero() {
		if b := IDTimeBound(p.FinishedBefore.Add(FinishedSlack)); upper == "" || b < upper {
			upper = b
		}
	}
	if p.After != "" {
		if p.Descending && (upper == "" || p.After < upper) {
			upper = p.After
		} else if !p.Descending && (lower == "" || p.After > lower) {
			lower = p.After
		}
	}
	return lower, upper
}

// FinishedIn reports whether a job that finished at completed (zero: not finished) passes p's
// finish-time bounds.
func (p ListParams) FinishedIn(completed time.Time) bool {
	if p.FinishedAfter.IsZero() && p.FinishedBefore.IsZero() {
		return true
	}
	return !completed.IsZero() && !completed.Before(p.FinishedAfter) &&
		(p.FinishedBefore.IsZero() || completed.Before(p.FinishedBefore))
}

// WorkflowListParams filters and pages a workflow listing, newest first unless Ascending.
type WorkflowListParams struct {
	// After is the cursor: the id of the last workflow of the previous page.
	After     string
	Ascending bool
	Limit     int
}

// WorkflowLister is implemented by stores that list their workflows by id (creation order).
type WorkflowLister interface {
	// ListWorkflows returns one page of workflows and the cursor of the next page ("" at the end).
	ListWorkflows(ctx context.Context, p WorkflowListParams) ([]*Workflow, string, error)
}
