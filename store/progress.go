package store

import (
	"context"
	"encoding/json"
	"time"
)

// Progress is what the worker of one run of a job reported about how far it got (ojs-progress.md).
type Progress struct {
	// Value is the numeric progress, 0 to 1, or nil when only Data was reported.
	Value *float64
	// Data is the latest structured progress (a JSON object), or nil.
	Data json.RawMessage
	// RunStartedAt is the StartedAt of the run that reported it: the progress belongs to that run
	// only, and a job whose StartedAt differs (a later attempt) has no progress yet.
	RunStartedAt time.Time
	// UpdatedAt is when it was last written (the store's clock).
	UpdatedAt time.Time
	// Checkpoint is the latest checkpoint saved for the job (a JSON object: the state a later
	// attempt resumes from, ojs-progress.md 6.4), or nil. Unlike Value and Data it is kept across
	// runs: a new run's reports replace it only when they carry a checkpoint of their own.
	Checkpoint json.RawMessage
}

// ProgressParams is one progress report for an active job.
type ProgressParams struct {
	ID string
	// Token, when set, is the claim token of the run reporting: a report from a run that lost its
	// claim is ignored. "" accepts the report from whichever run holds the job.
	Token string
	// Value is the numeric progress (clamped to 0..1 by the caller), or nil to keep the current one.
	Value *float64
	// Data replaces the structured progress when not nil.
	Data json.RawMessage
	// Checkpoint replaces the job's checkpoint when not nil (see Progress.Checkpoint).
	Checkpoint json.RawMessage
}

// ProgressStore keeps job progress. It is part of Store.
type ProgressStore interface {
	// SetProgress records p for the job's current run when the job is active (and, with a Token,
	// still runs under it), and reports whether it did: reports for jobs in any other state are
	// ignored (false, nil), as are reports for a job that does not exist. Within one run the numeric
	// value never decreases (a lower value keeps the higher one); Data, when given, replaces the
	// previous data. A report for a new run replaces what an earlier run reported, except the
	// checkpoint, which only a report carrying one replaces.
	SetProgress(ctx context.Context, p ProgressParams) (bool, error)
	// GetProgress returns the latest progress reported for the job, by whichever run (compare
	// RunStartedAt with the job's StartedAt), or nil when none was ever reported or the job does not
	// exist. Progress goes when its job is deleted.
	GetProgress(ctx context.Context, id string) (*Progress, error)
	// GetProgressBatch returns the progress of each of ids that has any, keyed by id, as
	// GetProgress would return it; ids of jobs without progress, or of no job, are left out.
	GetProgressBatch(ctx context.Context, ids []string) (map[string]*Progress, error)
}
