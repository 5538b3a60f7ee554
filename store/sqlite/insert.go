package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/store"
)

// insertChunk is the most rows one multi-row INSERT writes (64 × 22 values, well under SQLite's limit
// of 32766 bound values).
const insertChunk = 64

// Positions in insertRow.args of the values a unique replacement may change.
const (
	argState       = 6
	argScheduledAt = 12
)

// insertRow is one job's values for insertJobSQL (and insertExtraColumns), and the Job it becomes.
type insertRow struct {
	args  [insertJobArgs]any
	extra [insertExtraArgs]any
	job   *store.Job
}

// prepareInsert validates params and computes the rows and the jobs Insert returns. plain is true for
// Insert and InsertSQLTx, which refuse workflow fields; InsertWorkflow validated its own.
func prepareInsert(params []*store.InsertParams, nowUS int64, now time.Time, plain bool) ([]insertRow, error) {
	rows := make([]insertRow, len(params))
	for i, p := range params {
		if err := validateInsert(i, p, plain); err != nil {
			return nil, err
		}
		sched := now
		schedUS := nowUS
		if !p.ScheduledAt.IsZero() {
			schedUS = p.ScheduledAt.UnixMicro()
			sched = microTime(schedUS)
		}
		state := p.State
		switch state {
		case "":
			state = store.StateAvailable
			if schedUS > nowUS {
				state = store.StateScheduled
			}
		case store.StateAvailable, store.StateScheduled, store.StatePending:
		default:
			return nil, fmt.Errorf("insert job %s: state %q: a new job is available, scheduled or pending", p.ID, state)
		}
		args := p.Args
		if len(args) == 0 {
			args = json.RawMessage("[]")
		}
		tags, err := stringsJSON(p.Tags)
		if err != nil {
			return nil, fmt.Errorf("insert job %s: tags: %w", p.ID, err)
		}
		parents, err := stringsJSON(p.ParentIDs)
		if err != nil {
			return nil, fmt.Errorf("insert job %s: parent ids: %w", p.ID, err)
		}
		var expires, uniqueUntil time.Time
		if !p.ExpiresAt.IsZero() {
			expires = microTime(p.ExpiresAt.UnixMicro())
		}
		var uniqueStates []store.State
		var uniqueStatesCol any
		if p.UniqueKey != "" {
			uniqueStates = slices.Clone(store.UniqueStatesOrDefault(p.UniqueStates))
			uniqueStatesCol = encodeStates(uniqueStates)
			if !p.UniqueUntil.IsZero() {
				uniqueUntil = microTime(p.UniqueUntil.UnixMicro())
			}
		}
		r := &rows[i]
		r.args = [insertJobArgs]any{
			p.ID, p.Kind, p.Queue, string(args), nullJSON(p.Meta), int64(p.Priority), string(state),
			int64(p.MaxAttempts), tags, nullJSON(p.RetryPolicy), p.Timeout.Milliseconds(), nowUS, schedUS,
			micro(expires), nullString(p.UniqueKey), nullString(p.Tenant), nullString(p.RateKey),
			nullString(p.WorkflowID), parents,
		}
		r.extra = [insertExtraArgs]any{uniqueStatesCol, micro(uniqueUntil), nullString(string(p.RunOn))}
		r.job = &store.Job{
			ID: p.ID, Kind: p.Kind, Queue: p.Queue, Args: args, Meta: p.Meta, Priority: p.Priority,
			State: state, MaxAttempts: p.MaxAttempts, RetryPolicy: p.RetryPolicy, Timeout: p.Timeout,
			Tags: p.Tags, CreatedAt: now, ScheduledAt: sched, ExpiresAt: expires, UniqueKey: p.UniqueKey,
			UniqueStates: uniqueStates, UniqueUntil: uniqueUntil, Tenant: p.Tenant, RateKey: p.RateKey,
			WorkflowID: p.WorkflowID, ParentIDs: slices.Clone(p.ParentIDs), RunOn: p.RunOn,
		}
		if len(r.job.Meta) == 0 || string(r.job.Meta) == "null" {
			r.job.Meta = nil
		}
		if len(r.job.RetryPolicy) == 0 || string(r.job.RetryPolicy) == "null" {
			r.job.RetryPolicy = nil
		}
		r.job.Timeout = time.Duration(p.Timeout.Milliseconds()) * time.Millisecond
	}
	return rows, nil
}

// validateInsert checks the fields of job i that need no database.
func validateInsert(i int, p *store.InsertParams, plain bool) error {
	if p == nil {
		return fmt.Errorf("insert job %d: %w: nil params", i, store.ErrInvalidParams)
	}
	if p.ID == "" {
		return fmt.Errorf("insert job %d: %w: empty id", i, store.ErrInvalidParams)
	}
	if p.Kind == "" {
		return fmt.Errorf("insert job %s: %w: empty kind", p.ID, store.ErrInvalidParams)
	}
	if p.Queue == "" {
		return fmt.Errorf("insert job %s: %w: empty queue", p.ID, store.ErrInvalidParams)
	}
	if plain {
		if err := store.ValidatePlainInsert(p); err != nil {
			return fmt.Errorf("insert job %s: %w", p.ID, err)
		}
	}
	for _, st := range p.UniqueStates {
		if !st.Valid() {
			return fmt.Errorf("insert job %s: %w: unique state %q is not a job state", p.ID, store.ErrInvalidParams, st)
		}
	}
	if p.RateLimit != nil {
		if p.RateKey == "" {
			return fmt.Errorf("insert job %s: %w: a rate limit without a rate key", p.ID, store.ErrInvalidParams)
		}
		if err := validateRateLimit(p.RateKey, *p.RateLimit); err != nil {
			return fmt.Errorf("insert job %s: %w", p.ID, err)
		}
	}
	return nil
}

// needsTx reports whether inserting params needs more than writing rows: a unique key to check, or a
// rate limit to store.
func needsTx(params []*store.InsertParams) bool {
	for _, p := range params {
		if p.UniqueKey != "" || p.RateLimit != nil {
			return true
		}
	}
	return false
}

// insertNotifications returns one NotifyInsert per queue among jobs, pending jobs (and the existing
// jobs an ignored unique conflict returns, and earlier jobs of the batch a later one replaced)
// excepted: DueAt is zero when any of the queue's jobs is due
// now, else the earliest due time.
func insertNotifications(jobs []*store.Job, nowUS int64) []store.Notification {
	var out outbox
	announceInserted(&out, jobs, nowUS)
	return out.notifications()
}

// announceInserted adds the wake-ups of newly inserted jobs to out.
func announceInserted(out *outbox, jobs []*store.Job, nowUS int64) {
	for _, j := range jobs {
		if j.State == store.StatePending || j.Duplicate || j.State.Terminal() {
			continue
		}
		var due time.Time
		if (j.State == store.StateScheduled || j.State == store.StateRetryable) && j.ScheduledAt.UnixMicro() > nowUS {
			due = j.ScheduledAt
		}
		out.wake(j.Queue, due)
	}
}

func (s *Store) publish(ns []store.Notification) {
	for _, n := range ns {
		s.hub.Publish(n)
	}
}

// mapInsertErr turns a primary-key violation into ErrDuplicate and a unique-index one into
// ErrUniqueConflict.
func mapInsertErr(err error) error {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("insert jobs: %w: %v", store.ErrDuplicate, err)
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return fmt.Errorf("insert jobs: %w: %v", store.ErrUniqueConflict, err)
	}
	return fmt.Errorf("insert jobs: %w", err)
}

// execer is what insertRowsTx needs from a *sql.Tx or a txRunner.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Insert writes the jobs atomically and then announces them, once per queue. Up to 64 plain jobs
// take one statement (its own transaction); more take one transaction of 64-row statements. A
// duplicate id fails the whole batch with store.ErrDuplicate.
//
// A batch with unique jobs or rate limits takes one write transaction that stores the limits, then
// resolves each unique job's conflict (see insertTx) and writes it; the write lock it holds from its
// first statement makes the check and the write one step for every process on the file, and the
// unique index would refuse a second holder anyway.
func (s *Store) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if len(params) == 0 {
		return nil, nil
	}
	nowUS, now := s.nowMicro()
	rows, err := prepareInsert(params, nowUS, now, true)
	if err != nil {
		return nil, err
	}
	if needsTx(params) {
		return s.insertWithFeatures(ctx, params, rows, nowUS)
	}
	if err := s.insertRows(ctx, rows); err != nil {
		return nil, err
	}
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		jobs[i] = rows[i].job
	}
	s.publish(insertNotifications(jobs, nowUS))
	return jobs, nil
}

// insertFeatureQueries are the statements insertTx may run.
var insertFeatureQueries = slices.Concat(rateLimitQueries, []string{uniqueHolderSQL, releaseUniqueKeySQL,
	cancelJobSQL, insertJobsSQL(1, true)}, settleQueries)

// insertWithFeatures is Insert of a batch with unique jobs or rate limits, in one write transaction.
func (s *Store) insertWithFeatures(ctx context.Context, params []*store.InsertParams, rows []insertRow, nowUS int64) ([]*store.Job, error) {
	queries := slices.Clone(insertFeatureQueries)
	for _, n := range insertPieces(len(rows)) {
		queries = append(queries, insertJobsSQL(n, false))
	}
	r, err := s.begin(ctx, queries...)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var out outbox
	jobs, err := insertTx(ctx, r, params, rows, nowUS, &out)
	if err != nil {
		return nil, err
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("insert jobs: commit: %w", err)
	}
	s.publishOutbox(&out)
	return jobs, nil
}

// insertTx writes a batch with unique jobs or rate limits inside r's transaction and returns the jobs
// in params order, gathering its notifications in out. It stores the rate limits first, then takes
// the unique jobs in order, each meeting the job that holds its key, if any (an earlier job of the
// batch included):
//
//   - a holder whose UniqueUntil has passed loses its key (unique_key cleared) and the job is written;
//   - ConflictReject fails the call with a *store.UniqueConflictError (the caller rolls back);
//   - ConflictIgnore writes nothing and returns the holder with Duplicate set;
//   - ConflictReplace cancels the holder (telling its runner) and writes the job;
//     ConflictReplaceExceptSchedule does too, giving the job the holder's state and ScheduledAt when
//     the holder was scheduled or retryable.
//
// A replaced holder that would still hold the key (it was terminal already, or its unique states
// include cancelled) loses the key: a replacement means the new job holds it. A job whose state at
// insert is not one of its unique states (scheduled with a delay, pending) meets the holder all the
// same, though the unique index would not refuse it: a unique job is not inserted while another holds
// its key. The jobs without a key are written last, in 64-row statements.
func insertTx(ctx context.Context, r txRunner, params []*store.InsertParams, rows []insertRow, nowUS int64, out *outbox) ([]*store.Job, error) {
	if err := upsertRateLimits(ctx, r, params, nowUS); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	jobs := make([]*store.Job, len(rows))
	plain := make([]insertRow, 0, len(rows))
	written := map[string]int{} // id -> index, of the unique jobs written so far
	for i := range rows {
		row := &rows[i]
		jobs[i] = row.job
		if params[i].UniqueKey == "" {
			plain = append(plain, *row)
			continue
		}
		dup, replaced, err := resolveUnique(ctx, r, params[i], row, nowUS, out)
		if err != nil {
			return nil, err
		}
		if replaced != nil {
			if k, ok := written[replaced.ID]; ok {
				// An earlier job of this batch, replaced: return it as it is now, with what it replaced.
				replaced.Replaced = jobs[k].Replaced
				jobs[k] = replaced
			}
		}
		if dup != nil {
			jobs[i] = dup
			continue
		}
		if err := insertRowsTx(ctx, r, []insertRow{*row}, true); err != nil {
			return nil, err
		}
		written[row.job.ID] = i
	}
	if err := insertRowsTx(ctx, r, plain, false); err != nil {
		return nil, err
	}
	announceInserted(out, jobs, nowUS)
	return jobs, nil
}

// resolveUnique settles the conflict, if any, between the job of row and the job holding its unique
// key, as insertTx describes. It returns the holder as dup when the job must not be written (ignore),
// and as replaced, as it is afterwards, when the job replaced it.
func resolveUnique(ctx context.Context, r txRunner, p *store.InsertParams, row *insertRow, nowUS int64, out *outbox) (dup, replaced *store.Job, err error) {
	holder, err := firstJob(r.QueryContext(ctx, uniqueHolderSQL, p.UniqueKey))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("insert job %s: find holder of unique key: %w", p.ID, err)
	}
	if !holder.UniqueUntil.IsZero() && holder.UniqueUntil.UnixMicro() <= nowUS {
		if _, err := r.ExecContext(ctx, releaseUniqueKeySQL, holder.ID); err != nil {
			return nil, nil, fmt.Errorf("insert job %s: release unique key of job %s: %w", p.ID, holder.ID, err)
		}
		return nil, nil, nil
	}
	switch p.OnConflict {
	case store.ConflictIgnore:
		holder.Duplicate = true
		return holder, nil, nil
	case store.ConflictReplace, store.ConflictReplaceExceptSchedule:
		if p.OnConflict == store.ConflictReplaceExceptSchedule &&
			(holder.State == store.StateScheduled || holder.State == store.StateRetryable) {
			row.args[argState] = string(holder.State)
			row.args[argScheduledAt] = holder.ScheduledAt.UnixMicro()
			row.job.State = holder.State
			row.job.ScheduledAt = holder.ScheduledAt
		}
		replaced, before, err := replaceHolder(ctx, r, holder, nowUS, out)
		if err != nil {
			return nil, nil, fmt.Errorf("insert job %s: replace job %s: %w", p.ID, holder.ID, err)
		}
		if before != nil {
			row.job.Replaced = append(row.job.Replaced, before)
		}
		return nil, replaced, nil
	default:
		return nil, nil, &store.UniqueConflictError{Key: p.UniqueKey, ExistingID: holder.ID, ExistingState: holder.State}
	}
}

// replaceHolder cancels the job holding a key that a replacement takes over, clears its key if it
// would still hold it, and returns it as it is then and, when this cancelled it, as it was before
// (with the claim token of the run it stopped; see store.Job.Replaced).
func replaceHolder(ctx context.Context, r txRunner, holder *store.Job, nowUS int64, out *outbox) (after, before *store.Job, err error) {
	if !holder.State.Terminal() {
		cancelled, err := firstJob(r.QueryContext(ctx, cancelJobSQL, nowUS, holder.ID))
		if err != nil {
			return nil, nil, err
		}
		token, err := runToken(ctx, r, holder.ID)
		if err != nil {
			return nil, nil, err
		}
		out.cancel(cancelled.Queue, cancelled.ID, token)
		if err := afterTerminal(ctx, r, []*store.Job{cancelled}, nowUS, out); err != nil {
			return nil, nil, err
		}
		before = holder
		if before.State == store.StateActive {
			before.ClaimToken = token
		}
		holder = cancelled
	}
	if slices.Contains(holder.UniqueStates, holder.State) {
		if _, err := r.ExecContext(ctx, releaseUniqueKeySQL, holder.ID); err != nil {
			return nil, nil, err
		}
		holder.UniqueKey = ""
	}
	return holder, before, nil
}

// afterTerminal does what follows jobs reaching a terminal state in r's transaction: their pending
// workflow children are decided, and the queues of limited jobs are woken (a slot may be free).
func afterTerminal(ctx context.Context, r txRunner, jobs []*store.Job, nowUS int64, out *outbox) error {
	var finished []string
	for _, j := range jobs {
		if j.WorkflowID != "" {
			finished = append(finished, j.ID)
		}
		if j.RateKey != "" {
			out.wake(j.Queue, time.Time{})
		}
	}
	if len(finished) == 0 {
		return nil
	}
	return settleChildren(ctx, r, finished, nowUS, out)
}

// insertPieces splits n rows into statement sizes: full chunks of insertChunk, then the remainder as
// powers of two, so that at most seven distinct INSERT statements of each form are ever prepared.
func insertPieces(n int) []int {
	var out []int
	for ; n >= insertChunk; n -= insertChunk {
		out = append(out, insertChunk)
	}
	for size := insertChunk / 2; size > 0; size /= 2 {
		if n >= size {
			out = append(out, size)
			n -= size
		}
	}
	return out
}

// insertRows writes plain rows with this store's prepared statements: in one statement when one
// suffices, else in one write transaction.
func (s *Store) insertRows(ctx context.Context, rows []insertRow) error {
	pieces := insertPieces(len(rows))
	// Prepare first: while tx is open it holds the only writer connection.
	stmts := make([]*sql.Stmt, len(pieces))
	for i, n := range pieces {
		st, err := s.stmt(ctx, insertJobsSQL(n, false))
		if err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		stmts[i] = st
	}
	var tx *sql.Tx
	if len(pieces) > 1 {
		var err error
		if tx, err = s.w.BeginTx(ctx, nil); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	}
	args := make([]any, 0, min(len(rows), insertChunk)*insertJobArgs)
	for i, n := range pieces {
		args = args[:0]
		for k := range n {
			args = append(args, rows[k].args[:]...)
		}
		rows = rows[n:]
		st := stmts[i]
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return mapInsertErr(err)
		}
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("insert jobs: commit: %w", err)
		}
	}
	return nil
}

// InsertSQLTx inserts jobs inside the application's transaction tx, which must be on the same database
// file (normally begun on DB). The batch is atomic within tx (a savepoint): a duplicate id fails it
// with store.ErrDuplicate, a unique conflict under ConflictReject with a *store.UniqueConflictError,
// and either leaves tx as it was. The jobs become visible when tx commits. Unique jobs and rate limits
// are handled as by Insert, inside tx.
//
// Wake-up: when tx is on a writer connection this package opened (DB, normally), the notifications are
// queued on that connection and published by SQLite's commit hook as tx commits, to the Stores on
// that connection's file; a rollback drops them. So producers in this process are woken if and only
// if tx commits, as it commits (subscribers run inside the commit, which store.Notifier already
// requires to be quick). They cannot claim before the commit is complete: the claim needs the same
// writer connection, which tx holds until it ends.
//
// When tx is on a connection opened elsewhere (the application's own sql.Open of the same file), no
// hook can be attached, so the notifications are published at once, before tx ends. That is still
// safe: from its insert on, tx holds SQLite's single write lock, so a woken producer's claim (a write
// transaction) waits until tx ends and then sees exactly what it committed; after a rollback the
// wake-up finds nothing, which costs one empty claim. Other processes find the jobs by polling.
func (s *Store) InsertSQLTx(ctx context.Context, tx *sql.Tx, params []*store.InsertParams) ([]*store.Job, error) {
	if tx == nil {
		return nil, errors.New("insert jobs: nil transaction")
	}
	if len(params) == 0 {
		return nil, nil
	}
	nowUS, now := s.nowMicro()
	rows, err := prepareInsert(params, nowUS, now, true)
	if err != nil {
		return nil, err
	}
	r, cs, err := s.foreignTx(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT pronto_insert"); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	var out outbox
	jobs, err := s.insertInTx(ctx, r, params, rows, nowUS, &out)
	if err != nil {
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO pronto_insert"); rbErr != nil {
			return nil, errors.Join(err, rbErr)
		}
		if _, relErr := tx.ExecContext(ctx, "RELEASE pronto_insert"); relErr != nil {
			return nil, errors.Join(err, relErr)
		}
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE pronto_insert"); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	s.announceOnCommit(cs, &out)
	return jobs, nil
}

// foreignTx wraps tx, an application's transaction, for the statements of this store, and finds the
// connection it is on: connections this package opened carry a number in temp.user_version, and
// when it is this store's writer its prepared statements serve.
func (s *Store) foreignTx(ctx context.Context, tx *sql.Tx) (txRunner, *connState, error) {
	var connID int64
	if err := tx.QueryRowContext(ctx, "PRAGMA temp.user_version").Scan(&connID); err != nil {
		return txRunner{}, nil, err
	}
	cs := lookupConn(connID)
	if connID == 0 {
		cs = nil
	}
	r := txRunner{tx: tx}
	if cs != nil && cs.hub == s.hub {
		r.s = s
	}
	return r, cs, nil
}

// announceOnCommit publishes out's notifications when the transaction on cs commits (they are
// dropped if it rolls back), or at once when the connection is not one of this package's.
func (s *Store) announceOnCommit(cs *connState, out *outbox) {
	ns := out.notifications()
	if cs != nil {
		cs.mu.Lock()
		cs.pending = append(cs.pending, ns...)
		cs.mu.Unlock()
	} else {
		s.publish(ns)
	}
}

// insertInTx is the body of InsertSQLTx, inside its savepoint.
func (s *Store) insertInTx(ctx context.Context, r txRunner, params []*store.InsertParams, rows []insertRow, nowUS int64, out *outbox) ([]*store.Job, error) {
	if needsTx(params) {
		return insertTx(ctx, r, params, rows, nowUS, out)
	}
	if err := insertRowsTx(ctx, r, rows, false); err != nil {
		return nil, err
	}
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		jobs[i] = rows[i].job
	}
	announceInserted(out, jobs, nowUS)
	return jobs, nil
}

// insertRowsTx writes rows inside a transaction, in 64-row statements (the full form, with the
// columns of unique and workflow jobs, when full is set).
func insertRowsTx(ctx context.Context, ex execer, rows []insertRow, full bool) error {
	width := insertJobArgs
	if full {
		width += insertExtraArgs
	}
	args := make([]any, 0, min(len(rows), insertChunk)*width)
	for _, n := range insertPieces(len(rows)) {
		args = args[:0]
		for k := range n {
			args = append(args, rows[k].args[:]...)
			if full {
				args = append(args, rows[k].extra[:]...)
			}
		}
		rows = rows[n:]
		if _, err := ex.ExecContext(ctx, insertJobsSQL(n, full), args...); err != nil {
			return mapInsertErr(err)
		}
	}
	return nil
}
