package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// jobColumns is the column list every job-returning statement selects, in scanJob's order.
const jobColumns = `id, kind, queue, args, meta, priority, state, attempt, max_attempts, errors, result, tags,
	retry_policy, timeout_ms, created_at, scheduled_at, started_at, completed_at, expires_at, lease_expires_at,
	worker_id, unique_key, tenant, rate_key, workflow_id, parent_ids`

// rowScanner is *sql.Rows or *sql.Row.
type rowScanner interface {
	Scan(dest ...any) error
}

// scanJob reads one row of jobColumns.
func scanJob(rs rowScanner) (*store.Job, error) {
	var (
		j                                                 store.Job
		state                                             string
		priority, attempt, maxAttempts, timeoutMS         int64
		args, meta, result, retryPolicy                   []byte
		errs, tags, parents                               []byte
		createdAt, scheduledAt                            int64
		startedAt, completedAt, expiresAt, leaseExpiresAt sql.NullInt64
		workerID, uniqueKey, tenant, rateKey, workflowID  sql.NullString
	)
	if err := rs.Scan(&j.ID, &j.Kind, &j.Queue, &args, &meta, &priority, &state, &attempt, &maxAttempts,
		&errs, &result, &tags, &retryPolicy, &timeoutMS, &createdAt, &scheduledAt, &startedAt, &completedAt,
		&expiresAt, &leaseExpiresAt, &workerID, &uniqueKey, &tenant, &rateKey, &workflowID, &parents); err != nil {
		return nil, err
	}
	j.Args = args
	if len(meta) > 0 {
		j.Meta = meta
	}
	if len(result) > 0 {
		j.Result = result
	}
	if len(retryPolicy) > 0 {
		j.RetryPolicy = retryPolicy
	}
	j.Priority = int(priority)
	j.State = store.State(state)
	j.Attempt = int(attempt)
	j.MaxAttempts = int(maxAttempts)
	j.Timeout = time.Duration(timeoutMS) * time.Millisecond
	j.CreatedAt = microTime(createdAt)
	j.ScheduledAt = microTime(scheduledAt)
	j.StartedAt = nullMicroTime(startedAt)
	j.CompletedAt = nullMicroTime(completedAt)
	j.ExpiresAt = nullMicroTime(expiresAt)
	j.LeaseExpiresAt = nullMicroTime(leaseExpiresAt)
	j.WorkerID = workerID.String
	j.UniqueKey = uniqueKey.String
	j.Tenant = tenant.String
	j.RateKey = rateKey.String
	j.WorkflowID = workflowID.String
	if len(errs) > 0 {
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("job %s: decode errors: %w", j.ID, err)
		}
	}
	if len(tags) > 0 {
		if err := json.Unmarshal(tags, &j.Tags); err != nil {
			return nil, fmt.Errorf("job %s: decode tags: %w", j.ID, err)
		}
	}
	if len(parents) > 0 {
		if err := json.Unmarshal(parents, &j.ParentIDs); err != nil {
			return nil, fmt.Errorf("job %s: decode parent ids: %w", j.ID, err)
		}
	}
	return &j, nil
}

// scanJobs reads every row of rows and closes it.
func scanJobs(rows *sql.Rows, sizeHint int) ([]*store.Job, error) {
	defer rows.Close()
	jobs := make([]*store.Job, 0, sizeHint)
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

func microTime(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullMicroTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return microTime(v.Int64)
}

// micro converts t to unix microseconds, or NULL when t is zero.
func micro(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// nullString is NULL for "".
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullJSON is NULL for an empty or JSON-null value, and the text otherwise.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return string(b)
}

// stringsJSON encodes a string list as a JSON array, or NULL when empty.
func stringsJSON(v []string) (any, error) {
	if len(v) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
