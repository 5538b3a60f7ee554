package postgres

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// jobRow receives one row of jobCols. Every field is nullable because the single-job operations
// return an all-NULL job when they refuse a transition.
type jobRow struct {
	id             pgtype.UUID
	kind           pgtype.Text
	queue          pgtype.Text
	args           []byte
	meta           []byte
	priority       pgtype.Int4
	state          pgtype.Text
	attempt        pgtype.Int4
	maxAttempts    pgtype.Int4
	errors         []byte
	result         []byte
	tags           []string
	retryPolicy    []byte
	timeoutMS      pgtype.Int8
	createdAt      pgtype.Timestamptz
	scheduledAt    pgtype.Timestamptz
	startedAt      pgtype.Timestamptz
	completedAt    pgtype.Timestamptz
	expiresAt      pgtype.Timestamptz
	leaseExpiresAt pgtype.Timestamptz
	workerID       pgtype.Text
	uniqueKey      pgtype.Text
	tenant         pgtype.Text
	rateKey        pgtype.Text
	workflowID     pgtype.Text
	parentIDs      []pgtype.UUID
	uniqueStates   []string
	uniqueUntil    pgtype.Timestamptz
	runOn          pgtype.Text
	parentResults  []byte
	claimToken     pgtype.UUID
}

// dest returns the scan destinations in jobCols order.
func (r *jobRow) dest() []any {
	return []any{
		&r.id, &r.kind, &r.queue, &r.args, &r.meta, &r.priority, &r.state, &r.attempt,
		&r.maxAttempts, &r.errors, &r.result, &r.tags, &r.retryPolicy, &r.timeoutMS, &r.createdAt,
		&r.scheduledAt, &r.startedAt, &r.completedAt, &r.expiresAt, &r.leaseExpiresAt, &r.workerID,
		&r.uniqueKey, &r.tenant, &r.rateKey, &r.workflowID, &r.parentIDs, &r.uniqueStates,
		&r.uniqueUntil, &r.runOn, &r.parentResults, &r.claimToken,
	}
}

// job converts the scanned row into a store.Job.
func (r *jobRow) job() (*store.Job, error) {
	j := &store.Job{
		ID:             formatUUID(r.id.Bytes),
		Kind:           r.kind.String,
		Queue:          r.queue.String,
		Args:           r.args,
		Meta:           r.meta,
		Priority:       int(r.priority.Int32),
		State:          store.State(r.state.String),
		Attempt:        int(r.attempt.Int32),
		MaxAttempts:    int(r.maxAttempts.Int32),
		Result:         r.result,
		RetryPolicy:    r.retryPolicy,
		Timeout:        time.Duration(r.timeoutMS.Int64) * time.Millisecond,
		CreatedAt:      timeOf(r.createdAt),
		ScheduledAt:    timeOf(r.scheduledAt),
		StartedAt:      timeOf(r.startedAt),
		CompletedAt:    timeOf(r.completedAt),
		ExpiresAt:      timeOf(r.expiresAt),
		LeaseExpiresAt: timeOf(r.leaseExpiresAt),
		WorkerID:       r.workerID.String,
		UniqueKey:      r.uniqueKey.String,
		Tenant:         r.tenant.String,
		RateKey:        r.rateKey.String,
		WorkflowID:     r.workflowID.String,
		UniqueUntil:    timeOf(r.uniqueUntil),
		RunOn:          store.RunOn(r.runOn.String),
		ParentResults:  r.parentResults,
	}
	if r.claimToken.Valid && j.State == store.StateActive {
		j.ClaimToken = formatUUID(r.claimToken.Bytes)
	}
	if r.uniqueKey.Valid && len(r.uniqueStates) > 0 {
		j.UniqueStates = make([]store.State, len(r.uniqueStates))
		for i, st := range r.uniqueStates {
			j.UniqueStates[i] = store.State(st)
		}
	}
	if len(r.tags) > 0 {
		j.Tags = r.tags
	}
	if len(r.parentIDs) > 0 {
		j.ParentIDs = make([]string, len(r.parentIDs))
		for i, p := range r.parentIDs {
			j.ParentIDs[i] = formatUUID(p.Bytes)
		}
	}
	if len(r.errors) > 2 { // "[]" is the empty history
		if err := json.Unmarshal(r.errors, &j.Errors); err != nil {
			return nil, fmt.Errorf("decode error history of job %s: %w", j.ID, err)
		}
	}
	return j, nil
}

// scanJobs reads every row of jobCols into jobs, decoding them without Scan where it can
// (jobDecoder).
func scanJobs(rows pgx.Rows) ([]*store.Job, error) {
	defer rows.Close()
	var jobs []*store.Job
	var (
		dec    jobDecoder
		direct bool
	)
	for rows.Next() {
		if jobs == nil {
			dec, direct = newJobDecoder(rows)
		}
		var r jobRow
		if !direct || dec.decode(rows.RawValues(), &r) != nil {
			if err := rows.Scan(r.dest()...); err != nil {
				return nil, err
			}
		}
		j, err := r.job()
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// timeOf returns a timestamp, zero when NULL.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// nullText maps the empty string to NULL.
func nullText(s string) pgtype.Text {
	return pgtype.Text{String: s, Valid: s != ""}
}

// nullJSON maps an empty JSON value to NULL.
func nullJSON(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// parseUUID parses a UUID in its canonical 8-4-4-4-12 hex form (either case).
func parseUUID(s string) (pgtype.UUID, bool) {
	var u pgtype.UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	var buf [32]byte
	copy(buf[0:8], s[0:8])
	copy(buf[8:12], s[9:13])
	copy(buf[12:16], s[14:18])
	copy(buf[16:20], s[19:23])
	copy(buf[20:32], s[24:36])
	if _, err := hex.Decode(u.Bytes[:], buf[:]); err != nil {
		return u, false
	}
	u.Valid = true
	return u, true
}

// parseUUIDs parses ids, reporting the first that is not a UUID.
func parseUUIDs(ids []string) ([]pgtype.UUID, error) {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		u, ok := parseUUID(id)
		if !ok {
			return nil, fmt.Errorf("job id %q is not a UUID", id)
		}
		out[i] = u
	}
	return out, nil
}

// formatUUID writes a UUID in canonical lowercase form.
func formatUUID(b [16]byte) string {
	return uuidv7.Format(b)
}
