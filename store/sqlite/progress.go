package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// setProgressSQL upserts the progress of an active job's current run in one statement: a report from
// a new run (another started_at) replaces the row; within a run the value never decreases and data is
// replaced only when given; the checkpoint is replaced only when given, whichever the run.
const setProgressSQL = `INSERT INTO pronto_progress (job_id, run_started_at, value, data, updated_at, checkpoint)
	SELECT id, started_at, ?2, ?3, ?4, ?6 FROM pronto_jobs
	WHERE id = ?1 AND state = 'active' AND (?5 = '' OR claim_token = ?5)
	ON CONFLICT (job_id) DO UPDATE SET
		value = CASE
			WHEN pronto_progress.run_started_at <> excluded.run_started_at THEN excluded.value
			WHEN excluded.value IS NULL THEN pronto_progress.value
			WHEN pronto_progress.value IS NULL THEN excluded.value
			ELSE max(pronto_progress.value, excluded.value) END,
		data = CASE
			WHEN pronto_progress.run_started_at <> excluded.run_started_at THEN excluded.data
			ELSE coalesce(excluded.data, pronto_progress.data) END,
		checkpoint = coalesce(excluded.checkpoint, pronto_progress.checkpoint),
		run_started_at = excluded.run_started_at,
		updated_at = excluded.updated_at`

const getProgressSQL = `SELECT run_started_at, value, data, updated_at, checkpoint FROM pronto_progress WHERE job_id = ?1`

// SetProgress records progress for the job's current run when it is active.
func (s *Store) SetProgress(ctx context.Context, p store.ProgressParams) (bool, error) {
	st, err := s.stmt(ctx, setProgressSQL)
	if err != nil {
		return false, fmt.Errorf("set progress of job %s: %w", p.ID, err)
	}
	var value sql.NullFloat64
	if p.Value != nil {
		value = sql.NullFloat64{Float64: *p.Value, Valid: true}
	}
	var data sql.NullString
	if p.Data != nil {
		data = sql.NullString{String: string(p.Data), Valid: true}
	}
	var checkpoint sql.NullString
	if p.Checkpoint != nil {
		checkpoint = sql.NullString{String: string(p.Checkpoint), Valid: true}
	}
	nowUS, _ := s.nowMicro()
	res, err := st.ExecContext(ctx, p.ID, value, data, nowUS, p.Token, checkpoint)
	if err != nil {
		return false, fmt.Errorf("set progress of job %s: %w", p.ID, s.schemaHint(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("set progress of job %s: %w", p.ID, err)
	}
	return n > 0, nil
}

// GetProgress returns the latest progress reported for the job, or nil.
func (s *Store) GetProgress(ctx context.Context, id string) (*store.Progress, error) {
	p, err := scanProgress(s.readRow(ctx, getProgressSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get progress of job %s: %w", id, s.schemaHint(err))
	}
	return p, nil
}

// getProgressBatchSQL reads the progress of the jobs in the JSON array ?1.
const getProgressBatchSQL = `SELECT run_started_at, value, data, updated_at, checkpoint, job_id FROM pronto_progress
WHERE job_id IN (SELECT value FROM json_each(?1))`

// GetProgressBatch returns the progress of each of ids that has any, in one statement.
func (s *Store) GetProgressBatch(ctx context.Context, ids []string) (map[string]*store.Progress, error) {
	out := map[string]*store.Progress{}
	if len(ids) == 0 {
		return out, nil
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, getProgressBatchSQL)
	if err != nil {
		return nil, fmt.Errorf("get progress of %d jobs: %w", len(ids), s.schemaHint(err))
	}
	rows, err := st.QueryContext(ctx, string(arg))
	if err != nil {
		return nil, fmt.Errorf("get progress of %d jobs: %w", len(ids), s.schemaHint(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		p, err := scanProgress(rows, &id)
		if err != nil {
			return nil, fmt.Errorf("get progress of %d jobs: %w", len(ids), err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get progress of %d jobs: %w", len(ids), err)
	}
	return out, nil
}

// scanProgress reads a row of getProgressSQL's columns, then into more any further columns.
func scanProgress(row interface{ Scan(...any) error }, more ...any) (*store.Progress, error) {
	var runStarted, updated int64
	var value sql.NullFloat64
	var data, checkpoint sql.NullString
	if err := row.Scan(append([]any{&runStarted, &value, &data, &updated, &checkpoint}, more...)...); err != nil {
		return nil, err
	}
	p := &store.Progress{RunStartedAt: microTime(runStarted), UpdatedAt: microTime(updated)}
	if value.Valid {
		v := value.Float64
		p.Value = &v
	}
	if data.Valid {
		p.Data = []byte(data.String)
	}
	if checkpoint.Valid {
		p.Checkpoint = []byte(checkpoint.String)
	}
	return p, nil
}
