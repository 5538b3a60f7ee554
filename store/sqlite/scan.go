package sqlite

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// jobColumns is the column list every job-returning statement selects, in scanJob's order.
const jobColumns = `id, kind, queue, args, meta, priority, state, attempt, max_attempts, errors, result, tags,
	retry_policy, timeout_ms, created_at, scheduled_at, started_at, completed_at, expires_at, lease_expires_at,
	worker_id, unique_key, tenant, rate_key, workflow_id, parent_ids, unique_states, unique_until, run_on,
	parent_results, claim_token`

// claimedColumns is what the claim statement returns of each job it makes active (see scanClaimed):
// the columns every job has, then the columns most jobs leave NULL packed into one JSON array, or
// NULL when all of them are. Reading a column through database/sql costs about as much as SQLite's
// work on the row, so a plain job is read as 12 columns instead of 31. The state, start time, lease
// and worker id are what the claim wrote, known to the caller.
const claimedColumns = `id, kind, queue, args, priority, attempt, max_attempts, timeout_ms, created_at, scheduled_at,
	claim_token,
	CASE WHEN meta IS NULL AND errors IS NULL AND result IS NULL AND tags IS NULL AND retry_policy IS NULL
		AND completed_at IS NULL AND expires_at IS NULL AND unique_key IS NULL AND tenant IS NULL
		AND rate_key IS NULL AND workflow_id IS NULL AND parent_ids IS NULL AND unique_states IS NULL
		AND unique_until IS NULL AND run_on IS NULL AND parent_results IS NULL THEN NULL
	ELSE json_array(meta, errors, result, tags, retry_policy, completed_at, expires_at, unique_key, tenant,
		rate_key, workflow_id, parent_ids, unique_states, unique_until, run_on, parent_results) END`

// claimedExtras is the number of values in claimedColumns' JSON array.
const claimedExtras = 16

// scanClaimed reads every row of a claim statement (claimedColumns) and closes it. startUS,
// leaseUS and workerID are what the claim wrote on every job.
func scanClaimed(rows *sql.Rows, sizeHint int, startUS, leaseUS int64, workerID string) ([]*store.Job, error) {
	defer rows.Close()
	jobs := make([]*store.Job, 0, sizeHint)
	var (
		id, kind, queue, token                                  string
		args                                                    []byte
		priority, attempt, maxAttempts, timeoutMS, created, due int64
		extras                                                  sql.RawBytes
	)
	dest := []any{&id, &kind, &queue, &args, &priority, &attempt, &maxAttempts, &timeoutMS, &created, &due, &token, &extras}
	started, lease := microTime(startUS), microTime(leaseUS)
	for rows.Next() {
		args = nil
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		j := &store.Job{
			ID: id, Kind: kind, Queue: queue, Args: args, Priority: int(priority), State: store.StateActive,
			Attempt: int(attempt), MaxAttempts: int(maxAttempts), Timeout: time.Duration(timeoutMS) * time.Millisecond,
			CreatedAt: microTime(created), ScheduledAt: microTime(due), StartedAt: started, LeaseExpiresAt: lease,
			WorkerID: workerID, ClaimToken: token,
		}
		if len(extras) > 0 {
			if err := decodeClaimedExtras(j, extras); err != nil {
				return nil, fmt.Errorf("job %s: %w", j.ID, err)
			}
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// decodeClaimedExtras sets the fields of j carried by claimedColumns' JSON array, read as jobScanner
// reads the same columns.
func decodeClaimedExtras(j *store.Job, raw []byte) error {
	var vs []json.RawMessage
	if err := json.Unmarshal(raw, &vs); err != nil || len(vs) != claimedExtras {
		return fmt.Errorf("decode claimed columns: %d values, %v", len(vs), err)
	}
	text := func(i int) (string, error) {
		if string(vs[i]) == "null" {
			return "", nil
		}
		var v string
		err := json.Unmarshal(vs[i], &v)
		return v, err
	}
	var errs []error
	bytesOf := func(i int) []byte {
		v, err := text(i)
		errs = append(errs, err)
		if v == "" {
			return nil
		}
		return []byte(v)
	}
	str := func(i int) string {
		v, err := text(i)
		errs = append(errs, err)
		return v
	}
	when := func(i int) time.Time {
		if string(vs[i]) == "null" {
			return time.Time{}
		}
		var us int64
		errs = append(errs, json.Unmarshal(vs[i], &us))
		return microTime(us)
	}
	list := func(i int, into any) {
		if b := bytesOf(i); b != nil {
			errs = append(errs, json.Unmarshal(b, into))
		}
	}
	j.Meta = bytesOf(0)
	list(1, &j.Errors)
	j.Result = bytesOf(2)
	list(3, &j.Tags)
	j.RetryPolicy = bytesOf(4)
	j.CompletedAt = when(5)
	j.ExpiresAt = when(6)
	j.UniqueKey = str(7)
	j.Tenant = str(8)
	j.RateKey = str(9)
	j.WorkflowID = str(10)
	list(11, &j.ParentIDs)
	j.UniqueStates = decodeStates(str(12))
	j.UniqueUntil = when(13)
	j.RunOn = store.RunOn(str(14))
	j.ParentResults = bytesOf(15)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("decode claimed columns: %w", err)
	}
	return nil
}

// rowScanner is *sql.Rows or *sql.Row.
type rowScanner interface {
	Scan(dest ...any) error
}

// jobScanner reads rows of jobColumns. Its destinations are reused from row to row, so scanning a
// row allocates only the Job and its own byte slices.
type jobScanner struct {
	id, kind, queue, state                            string
	priority, attempt, maxAttempts, timeoutMS         int64
	args, meta, result, retryPolicy, parentResults    []byte
	errs, tags, parents                               sql.RawBytes
	createdAt, scheduledAt                            int64
	startedAt, completedAt, expiresAt, leaseExpiresAt sql.NullInt64
	uniqueUntil                                       sql.NullInt64
	workerID, uniqueKey, tenant, rateKey, workflowID  sql.NullString
	uniqueStates, runOn, claimToken                   sql.NullString
	dest                                              [31]any
}

func newJobScanner() *jobScanner {
	sc := &jobScanner{}
	sc.dest = [31]any{&sc.id, &sc.kind, &sc.queue, &sc.args, &sc.meta, &sc.priority, &sc.state, &sc.attempt,
		&sc.maxAttempts, &sc.errs, &sc.result, &sc.tags, &sc.retryPolicy, &sc.timeoutMS, &sc.createdAt,
		&sc.scheduledAt, &sc.startedAt, &sc.completedAt, &sc.expiresAt, &sc.leaseExpiresAt, &sc.workerID,
		&sc.uniqueKey, &sc.tenant, &sc.rateKey, &sc.workflowID, &sc.parents, &sc.uniqueStates, &sc.uniqueUntil,
		&sc.runOn, &sc.parentResults, &sc.claimToken}
	return sc
}

// scan reads the current row of rows (a *sql.Rows: *sql.Row refuses sql.RawBytes).
func (sc *jobScanner) scan(rs rowScanner) (*store.Job, error) {
	sc.args, sc.meta, sc.result, sc.retryPolicy, sc.parentResults = nil, nil, nil, nil, nil
	if err := rs.Scan(sc.dest[:]...); err != nil {
		return nil, err
	}
	j := &store.Job{
		ID:             sc.id,
		Kind:           sc.kind,
		Queue:          sc.queue,
		Args:           sc.args,
		Priority:       int(sc.priority),
		State:          store.State(sc.state),
		Attempt:        int(sc.attempt),
		MaxAttempts:    int(sc.maxAttempts),
		Timeout:        time.Duration(sc.timeoutMS) * time.Millisecond,
		CreatedAt:      microTime(sc.createdAt),
		ScheduledAt:    microTime(sc.scheduledAt),
		StartedAt:      nullMicroTime(sc.startedAt),
		CompletedAt:    nullMicroTime(sc.completedAt),
		ExpiresAt:      nullMicroTime(sc.expiresAt),
		LeaseExpiresAt: nullMicroTime(sc.leaseExpiresAt),
		WorkerID:       sc.workerID.String,
		UniqueKey:      sc.uniqueKey.String,
		Tenant:         sc.tenant.String,
		RateKey:        sc.rateKey.String,
		WorkflowID:     sc.workflowID.String,
		UniqueStates:   decodeStates(sc.uniqueStates.String),
		UniqueUntil:    nullMicroTime(sc.uniqueUntil),
		RunOn:          store.RunOn(sc.runOn.String),
	}
	if j.State == store.StateActive {
		j.ClaimToken = sc.claimToken.String
	}
	if len(sc.parentResults) > 0 {
		j.ParentResults = sc.parentResults
	}
	if len(sc.meta) > 0 {
		j.Meta = sc.meta
	}
	if len(sc.result) > 0 {
		j.Result = sc.result
	}
	if len(sc.retryPolicy) > 0 {
		j.RetryPolicy = sc.retryPolicy
	}
	if len(sc.errs) > 0 {
		if err := json.Unmarshal(sc.errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("job %s: decode errors: %w", j.ID, err)
		}
	}
	if len(sc.tags) > 0 {
		if err := json.Unmarshal(sc.tags, &j.Tags); err != nil {
			return nil, fmt.Errorf("job %s: decode tags: %w", j.ID, err)
		}
	}
	if len(sc.parents) > 0 {
		if err := json.Unmarshal(sc.parents, &j.ParentIDs); err != nil {
			return nil, fmt.Errorf("job %s: decode parent ids: %w", j.ID, err)
		}
	}
	return j, nil
}

// firstJob reads the one job a query returns, or sql.ErrNoRows; it takes QueryContext's results.
func firstJob(rows *sql.Rows, err error) (*store.Job, error) {
	if err != nil {
		return nil, err
	}
	jobs, err := scanJobs(rows, 1)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, sql.ErrNoRows
	}
	return jobs[0], nil
}

// scanJobs reads every row of rows and closes it.
func scanJobs(rows *sql.Rows, sizeHint int) ([]*store.Job, error) {
	defer rows.Close()
	jobs := make([]*store.Job, 0, sizeHint)
	sc := newJobScanner()
	for rows.Next() {
		j, err := sc.scan(rows)
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

// encodeStates writes states as the unique_states column holds them, ",available,active,", so that
// instr(unique_states, ',' || state || ',') tests membership.
func encodeStates(states []store.State) string {
	var b strings.Builder
	b.WriteByte(',')
	for _, st := range states {
		b.WriteString(string(st))
		b.WriteByte(',')
	}
	return b.String()
}

// decodeStates reads an encodeStates value; "" (no unique key) is nil.
func decodeStates(v string) []store.State {
	v = strings.Trim(v, ",")
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	out := make([]store.State, len(parts))
	for i, p := range parts {
		out[i] = store.State(p)
	}
	return out
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
