package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

// setProgressSQL upserts the progress of an active job's current run in one statement: a report from
// a new run (another started_at) replaces the row; within a run the value never decreases and data is
// replaced only when given; the checkpoint is replaced only when given, whichever the run. It reads the job row without locking it, so a report never waits for (or
// holds up) a claim, heartbeat or outcome of the job.
const setProgressSQL = `INSERT INTO {schema}.progress AS p (job_id, run_started_at, value, data, updated_at, checkpoint)
	SELECT j.id, j.started_at, $2, $3, now(), $5 FROM {schema}.jobs j
	WHERE j.id = $1 AND j.state = 'active' AND ($4::uuid IS NULL OR j.claim_token = $4::uuid)
	ON CONFLICT (job_id) DO UPDATE SET
		value = CASE
			WHEN p.run_started_at <> excluded.run_started_at THEN excluded.value
			ELSE greatest(p.value, excluded.value) END,
		data = CASE
			WHEN p.run_started_at <> excluded.run_started_at THEN excluded.data
			ELSE coalesce(excluded.data, p.data) END,
		checkpoint = coalesce(excluded.checkpoint, p.checkpoint),
		run_started_at = excluded.run_started_at,
		updated_at = excluded.updated_at`

const getProgressSQL = `SELECT run_started_at, value, data, updated_at, checkpoint FROM {schema}.progress WHERE job_id = $1`

// getProgressBatchSQL reads the progress of the jobs $1.
const getProgressBatchSQL = `SELECT job_id, run_started_at, value, data, updated_at, checkpoint FROM {schema}.progress
WHERE job_id = ANY($1::uuid[])`

// GetProgressBatch returns the progress of each of ids that has any, in one statement.
func (s *Store) GetProgressBatch(ctx context.Context, ids []string) (map[string]*store.Progress, error) {
	us := make([]pgtype.UUID, 0, len(ids))
	for _, id := range ids {
		if u, ok := parseUUID(id); ok {
			us = append(us, u)
		}
	}
	out := map[string]*store.Progress{}
	if len(us) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, s.expand.Replace(getProgressBatchSQL), us)
	if err != nil {
		return nil, fmt.Errorf("get progress of %d jobs: %w", len(us), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id pgtype.UUID
		var runStarted, updated pgtype.Timestamptz
		var value *float64
		var data, checkpoint []byte
		if err := rows.Scan(&id, &runStarted, &value, &data, &updated, &checkpoint); err != nil {
			return nil, fmt.Errorf("get progress of %d jobs: %w", len(us), err)
		}
		out[formatUUID(id.Bytes)] = &store.Progress{RunStartedAt: timeOf(runStarted), UpdatedAt: timeOf(updated),
			Value: value, Data: data, Checkpoint: checkpoint}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get progress of %d jobs: %w", len(us), err)
	}
	return out, nil
}

// SetProgress records progress for the job's current run when it is active.
func (s *Store) SetProgress(ctx context.Context, p store.ProgressParams) (bool, error) {
	id, ok := parseUUID(p.ID)
	if !ok {
		return false, nil // no job has it
	}
	var token pgtype.UUID
	if p.Token != "" {
		t, ok := parseUUID(p.Token)
		if !ok {
			return false, nil // no run holds it
		}
		token = t
	}
	var data []byte
	if p.Data != nil {
		data = p.Data
	}
	var checkpoint []byte
	if p.Checkpoint != nil {
		checkpoint = p.Checkpoint
	}
	tag, err := s.pool.Exec(ctx, s.expand.Replace(setProgressSQL), id, p.Value, data, token, checkpoint)
	if err != nil {
		return false, fmt.Errorf("set progress of job %s: %w", p.ID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// GetProgress returns the latest progress reported for the job, or nil.
func (s *Store) GetProgress(ctx context.Context, id string) (*store.Progress, error) {
	u, ok := parseUUID(id)
	if !ok {
		return nil, nil
	}
	var runStarted, updated pgtype.Timestamptz
	var value *float64
	var data, checkpoint []byte
	err := s.pool.QueryRow(ctx, s.expand.Replace(getProgressSQL), u).Scan(&runStarted, &value, &data, &updated, &checkpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get progress of job %s: %w", id, err)
	}
	return &store.Progress{RunStartedAt: timeOf(runStarted), UpdatedAt: timeOf(updated), Value: value, Data: data,
		Checkpoint: checkpoint}, nil
}
