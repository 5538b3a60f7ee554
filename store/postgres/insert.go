package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

// Batch sizes choosing how Insert writes plain jobs. Below arraysMin, one pipelined batch of
// single-row INSERTs (one round trip); so too up to pipelineMax when a job of the batch can be
// handed to a waiting producer (sqlInsertHanded is a single-row INSERT). Up to arraysMax, one
// INSERT of parallel arrays, also one round trip, sending only the columns in which the jobs differ
// (see sqlInsertArrays): from 4 jobs on it costs the database less than as many single INSERTs
// (BenchmarkSmallInsert, eight inserters at once: equal at 4 jobs, 15% more jobs/s at 8, 30% at
// 16), and merged HTTP enqueues are mostly such batches (docs/benchmarks.md, seventeenth
// session). Above arraysMax, COPY, which streams the rows in four round trips (the transaction's
// timestamp, the COPY statement, its data, the commit) instead of building one message of them all.
// Since the arrays carry only the columns that differ, they beat COPY at every size measured, 100
// to 10,000 jobs (20-35% less time per batch of 1000, a third to half of the client's CPU;
// docs/benchmarks.md, sixteenth session).
// Batches that are not plain (unique jobs, workflows) use COPY above pipelineMax.
const (
	arraysMin   = 4
	pipelineMax = 9
	arraysMax   = 10000
)

// pgUniqueViolation is PostgreSQL's SQLSTATE for a unique constraint violation.
const pgUniqueViolation = "23505"

// copyColumns are the columns COPY writes; the others take their defaults.
var copyColumns = []string{
	"id", "kind", "queue", "args", "meta", "priority", "state", "max_attempts", "tags",
	"retry_policy", "timeout_ms", "created_at", "scheduled_at", "expires_at", "unique_key", "tenant",
	"rate_key", "workflow_id", "parent_ids", "unique_states", "unique_until", "run_on", "held",
}

// insertRow is one validated job to insert.
type insertRow struct {
	p         *store.InsertParams
	id        pgtype.UUID
	state     store.State
	parentIDs []pgtype.UUID
	tags      []string
	// uniqueStates are the states holding p.UniqueKey (the defaults when none are given); nil
	// without a key.
	uniqueStates []string
	// held is the job's held column when COPY writes it: a limit bounds its rate key (see
	// heldAtInsert, which the INSERT statements compute themselves).
	held bool
}

// Insert writes the jobs atomically and announces them, once per queue. A batch without unique
// jobs or rate limits takes the fast paths: up to arraysMax (10,000) jobs take one round trip (a
// pipelined batch of INSERTs, or one INSERT of arrays, with the NOTIFYs, run as one implicit
// transaction); larger batches are written with COPY in a transaction. A batch with unique jobs or
// rate limits runs in a transaction of its own, in two round trips unless a unique job meets a
// holder (see insertSpecial). An id that exists already fails the whole call with
// store.ErrDuplicate; a unique job refused by its key's holder fails it with a
// *store.UniqueConflictError.
func (s *Store) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if len(params) == 0 {
		return nil, nil
	}
	rows, special, err := prepareInsert(params, false)
	if err != nil {
		return nil, err
	}
	if special {
		jobs, err := s.insertSpecialPool(ctx, rows)
		if err != nil {
			return nil, insertError(err)
		}
		return jobs, nil
	}
	var jobs []*store.Job
	switch {
	case len(rows) <= pipelineMax && s.handoff != nil:
		jobs, err = s.insertHandingOff(ctx, rows)
	case len(rows) < arraysMin:
		jobs, err = s.insertBatch(ctx, s.pool, rows, nil)
	case len(rows) <= arraysMax:
		jobs, err = s.insertArrays(ctx, s.pool, rows, nil)
	default:
		jobs, err = s.insertCopyPool(ctx, rows)
	}
	if err != nil {
		return nil, insertError(err)
	}
	return jobs, nil
}

// InsertFast writes the jobs as Insert does and returns how many it stored, without building them
// (store.FastInserter): the plain batches written with one INSERT of arrays or with COPY (from
// arraysMin jobs on, or above pipelineMax where the hand-off is on) are not read back, and no Job
// is made per job. Other batches go through Insert.
func (s *Store) InsertFast(ctx context.Context, params []*store.InsertParams) (int, error) {
	if len(params) < arraysMin || (len(params) <= pipelineMax && s.handoff != nil) {
		jobs, err := s.Insert(ctx, params)
		return store.CountStored(jobs), err
	}
	rows, special, err := prepareInsert(params, false)
	if err != nil {
		return 0, err
	}
	if special {
		jobs, err := s.insertSpecialPool(ctx, rows)
		if err != nil {
			return 0, insertError(err)
		}
		return store.CountStored(jobs), nil
	}
	if len(rows) <= arraysMax {
		_, err = s.writeArrays(ctx, s.pool, rows, nil)
	} else {
		_, err = s.copyPool(ctx, rows)
	}
	if err != nil {
		return 0, insertError(err)
	}
	return len(rows), nil
}

// insertArrays writes plain jobs (see sqlInsertArrays) with one INSERT of parallel arrays, pipelined
// with their notifications: one round trip, one implicit transaction (or db's transaction, in the
// savepoint sp when it is not nil, opened and released in the same batch).
func (s *Store) insertArrays(ctx context.Context, db batchSender, rows []insertRow, sp *txBounds) ([]*store.Job, error) {
	now, err := s.writeArrays(ctx, db, rows, sp)
	if err != nil {
		return nil, err
	}
	return jobsFromCopy(rows, now), nil
}

// writeArrays is insertArrays without building the jobs: it returns the transaction's timestamp,
// which every row took as created_at.
func (s *Store) writeArrays(ctx context.Context, db batchSender, rows []insertRow, sp *txBounds) (time.Time, error) {
	params, err := arraysParams(rows)
	if err != nil {
		return time.Time{}, err
	}
	var now time.Time
	var written int
	b := &pgx.Batch{}
	if sp != nil {
		b.Queue(sp.begin)
	}
	b.Queue(s.q.insertArrays, params...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&now, &written)
	})
	for _, note := range insertNotifications(rows, time.Now()) {
		b.Queue(s.q.notify, note)
	}
	if sp != nil {
		b.Queue(sp.commit)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return time.Time{}, err
	}
	if written != len(rows) {
		return time.Time{}, fmt.Errorf("wrote %d of %d jobs", written, len(rows))
	}
	return now, nil
}

// arraysParams is the parameters of sqlInsertArrays for rows. FlatArray spares pgx the reflection
// it uses on slices of other element types (as in finishArgs): about 8% of the client's CPU in an
// insert of 100, 309 allocations of 1733.
func arraysParams(rows []insertRow) ([]any, error) {
	n := len(rows)
	var (
		ids       = make([]pgtype.UUID, n)
		kinds     = make([]string, n)
		queues    = make([]string, n)
		args      = make([][]byte, n)
		metas     = make([][]byte, n)
		prios     = make([]int32, n)
		states    = make([]string, n)
		attempts  = make([]int32, n)
		tags      = make([][]byte, n)
		policies  = make([][]byte, n)
		timeouts  = make([]int64, n)
		scheduled = make([]pgtype.Timestamptz, n)
		expires   = make([]pgtype.Timestamptz, n)
		tenants   = make([]pgtype.Text, n)
		rateKeys  = make([]pgtype.Text, n)
	)
	for i := range rows {
		r := &rows[i]
		p := r.p
		ids[i], kinds[i], queues[i] = r.id, p.Kind, p.Queue
		args[i], metas[i] = argsOrEmpty(p.Args), nullJSON(p.Meta)
		prios[i], states[i], attempts[i] = int32(p.Priority), string(r.state), int32(p.MaxAttempts)
		if len(r.tags) > 0 {
			b, err := json.Marshal(r.tags)
			if err != nil {
				return nil, err
			}
			tags[i] = b
		}
		policies[i], timeouts[i] = nullJSON(p.RetryPolicy), p.Timeout.Milliseconds()
		scheduled[i], expires[i] = nullTime(p.ScheduledAt), nullTime(p.ExpiresAt)
		tenants[i], rateKeys[i] = nullText(p.Tenant), nullText(p.RateKey)
	}
	params := []any{pgtype.FlatArray[pgtype.UUID](ids)}
	scalars := make([]any, 0, 14)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[string](kinds), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[string](queues), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[[]byte](args), bytes.Equal)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[[]byte](metas), eqNullBytes)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[int32](prios), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[string](states), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[int32](attempts), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[[]byte](tags), eqNullBytes)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[[]byte](policies), eqNullBytes)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[int64](timeouts), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[pgtype.Timestamptz](scheduled), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[pgtype.Timestamptz](expires), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[pgtype.Text](tenants), eqComparable)
	params, scalars = squeeze(params, scalars, pgtype.FlatArray[pgtype.Text](rateKeys), eqComparable)
	return append(params, scalars...), nil
}

// squeeze appends to params the column vals (one value per job) and to scalars NULL when the jobs'
// values differ, or else an empty array and the one value they share (see sqlInsertArrays).
func squeeze[T any](params, scalars []any, vals pgtype.FlatArray[T], eq func(a, b T) bool) ([]any, []any) {
	for i := 1; i < len(vals); i++ {
		if !eq(vals[0], vals[i]) {
			return append(params, vals), append(scalars, nil)
		}
	}
	if len(vals) == 0 {
		return append(params, vals), append(scalars, nil)
	}
	return append(params, vals[:0]), append(scalars, vals[0])
}

func eqComparable[T comparable](a, b T) bool { return a == b }

// eqNullBytes is bytes.Equal telling NULL (nil) from an empty value.
func eqNullBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// InsertPgxTx inserts the jobs inside the application's transaction tx. They become visible, and
// their notifications are delivered, only when tx commits; a rollback leaves no trace (a unique
// job's key is held only from the commit on). tx must be on the store's database.
//
// The batch runs in a savepoint of tx, as the SQLite store's InsertSQLTx does: when it fails (a
// duplicate id, store.ErrDuplicate; a unique conflict) nothing of it is kept and tx stays usable,
// where a failed statement would otherwise abort all of tx (SQLSTATE 25P02). The savepoint costs
// no round trip: it is opened and released in the pipelined batch that writes the jobs (a COPY
// opens it with the query of the transaction's timestamp and releases it with the notifications);
// only a failure takes one more, to roll it back. Each call is a subtransaction of tx: a
// transaction that inserts many times should prefer one batch (PostgreSQL keeps up to 64
// subtransactions of a transaction in shared memory, and snapshots cost more past that).
func (s *Store) InsertPgxTx(ctx context.Context, tx pgx.Tx, params []*store.InsertParams) ([]*store.Job, error) {
	if len(params) == 0 {
		return nil, nil
	}
	rows, special, err := prepareInsert(params, false)
	if err != nil {
		return nil, err
	}
	// A transaction aborted already refuses the savepoint too; rolling back "to" it would then
	// name no savepoint of ours.
	aborted := txAborted(tx)
	var jobs []*store.Job
	if special {
		// insertSpecial rolls its savepoint back itself.
		jobs, err = s.insertSpecial(ctx, tx, rows, insertSavepoint)
	} else {
		if len(rows) < arraysMin {
			jobs, err = s.insertBatch(ctx, tx, rows, &insertSavepoint)
		} else if len(rows) <= arraysMax {
			jobs, err = s.insertArrays(ctx, tx, rows, &insertSavepoint)
		} else {
			jobs, err = s.insertCopy(ctx, tx, rows)
		}
		if err != nil && !aborted && txAborted(tx) {
			// The failed statement aborted the savepoint, not tx: undo it, and tx is usable again.
			_, _ = tx.Exec(context.WithoutCancel(ctx), insertSavepoint.rollback)
		}
	}
	if err != nil {
		return nil, insertError(err)
	}
	return jobs, nil
}

// txAborted reports whether tx is in a failed state, where PostgreSQL refuses every statement but a
// rollback (pgx tracks it from the server's ReadyForQuery).
func txAborted(tx pgx.Tx) bool {
	c := tx.Conn()
	return c != nil && c.PgConn().TxStatus() == 'E'
}

// prepareInsert validates params and converts what the database needs converted. special reports
// a job with a unique key or a rate limit to write, which the fast paths do not handle. Workflow
// fields are accepted only from InsertWorkflow (workflow true).
func prepareInsert(params []*store.InsertParams, workflow bool) (rows []insertRow, special bool, err error) {
	rows = make([]insertRow, len(params))
	for i, p := range params {
		if p == nil {
			return nil, false, fmt.Errorf("insert jobs: %w: params[%d] is nil", store.ErrInvalidParams, i)
		}
		if !workflow {
			if err := store.ValidatePlainInsert(p); err != nil {
				return nil, false, fmt.Errorf("insert jobs: %w", err)
			}
		}
		r, err := prepareRow(p)
		if err != nil {
			return nil, false, fmt.Errorf("insert jobs: %w: job %s: %w", store.ErrInvalidParams, p.ID, err)
		}
		rows[i] = r
		special = special || p.UniqueKey != "" || p.RateLimit != nil
	}
	return rows, special, nil
}

// prepareRow validates one job's params.
func prepareRow(p *store.InsertParams) (insertRow, error) {
	id, ok := parseUUID(p.ID)
	if !ok {
		return insertRow{}, errors.New("the job id is not a UUID")
	}
	state := p.State
	switch state {
	case "":
		state = store.StateAvailable
	case store.StateAvailable, store.StateScheduled, store.StatePending:
	default:
		return insertRow{}, fmt.Errorf("cannot insert in state %q (available, scheduled or pending)", state)
	}
	var parents []pgtype.UUID
	if len(p.ParentIDs) > 0 {
		var err error
		if parents, err = parseUUIDs(p.ParentIDs); err != nil {
			return insertRow{}, fmt.Errorf("parent %w", err)
		}
	}
	tags := p.Tags
	if tags == nil {
		tags = []string{}
	}
	r := insertRow{p: p, id: id, state: state, parentIDs: parents, tags: tags}
	if p.UniqueKey != "" {
		for _, st := range store.UniqueStatesOrDefault(p.UniqueStates) {
			if !st.Valid() {
				return insertRow{}, fmt.Errorf("unique state %q is not a job state", st)
			}
			r.uniqueStates = append(r.uniqueStates, string(st))
		}
	}
	if p.RateLimit != nil {
		if p.RateKey == "" {
			return insertRow{}, errors.New("a rate limit is given without a rate key")
		}
		if err := validateRateLimit(*p.RateLimit); err != nil {
			return insertRow{}, err
		}
	}
	return r, nil
}

// batchSender is what a pool and a transaction offer for pipelined batches.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// insertBatch sends one INSERT per job and one NOTIFY per queue as a single pipelined batch, in the
// savepoint sp of db's transaction when sp is not nil (opened and released in the same batch).
func (s *Store) insertBatch(ctx context.Context, db batchSender, rows []insertRow, sp *txBounds) ([]*store.Job, error) {
	notes := insertNotifications(rows, time.Now())
	return s.insertRowsThen(ctx, db, rows, sp, func(b *pgx.Batch) {
		for _, n := range notes {
			b.Queue(s.q.notify, n)
		}
	})
}

// insertHandingOff is insertBatch on the pool with the hand-off (handoff.go): a job due now, without
// a tenant, is written already claimed by a producer waiting for it when there is one
// (sqlInsertHanded), and a queue whose announced jobs were all handed is not announced. Still one
// round trip and one transaction.
func (s *Store) insertHandingOff(ctx context.Context, rows []insertRow) ([]*store.Job, error) {
	now := time.Now()
	handable := make([]bool, len(rows))
	// queues holds, per queue, the ids of its handable jobs, or nil when it has a job to announce
	// that cannot be handed.
	queues := make(map[string][]pgtype.UUID, 1)
	anyHandable := false
	for i := range rows {
		r := &rows[i]
		ids, seen := queues[r.p.Queue]
		// A job with a rate key is left to a claim, which counts its key's active jobs and window.
		handable[i] = r.state == store.StateAvailable && r.p.Tenant == "" && r.p.RateKey == "" &&
			(r.p.ScheduledAt.IsZero() || !r.p.ScheduledAt.After(now)) && s.handoff.tryHandoff(r.p.Queue, r.p.Kind, now)
		anyHandable = anyHandable || handable[i]
		switch {
		case handable[i] && (!seen || ids != nil):
			queues[r.p.Queue] = append(ids, r.id)
		case !handable[i] && r.state != store.StatePending:
			queues[r.p.Queue] = nil
		case !seen:
			queues[r.p.Queue] = ids
		}
	}
	if !anyHandable {
		if len(rows) < arraysMin {
			return s.insertBatch(ctx, s.pool, rows, nil)
		}
		return s.insertArrays(ctx, s.pool, rows, nil)
	}
	b := &pgx.Batch{}
	states := make([]store.State, len(rows))
	times := make([][2]time.Time, len(rows))
	passedOver := make([]bool, len(rows))
	planned := false
	for i := range rows {
		r := &rows[i]
		sql := s.q.insertJob
		if handable[i] {
			sql = s.q.insertHanded
			if !planned {
				b.Queue(s.q.handoffPlan)
				planned = true
			}
		}
		b.Queue(sql, r.args(r.state, r.p.ScheduledAt)...).QueryRow(func(row pgx.Row) error {
			if !handable[i] {
				states[i] = r.state
				return row.Scan(&times[i][0], &times[i][1])
			}
			var state string
			var notified any
			err := row.Scan(&times[i][0], &times[i][1], &state, &notified, &passedOver[i])
			states[i] = store.State(state)
			return err
		})
	}
	for _, note := range insertNotifications(rows, now) {
		n, _ := decodePayload(note)
		if ids := queues[n.Queue]; ids != nil {
			b.Queue(s.q.notifyUnlessHanded, note, pgtype.FlatArray[pgtype.UUID](ids))
		} else {
			b.Queue(s.q.notify, note)
		}
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		jobs[i] = jobFromInsert(&rows[i], states[i], times[i][0], times[i][1])
		if states[i] == store.StateActive {
			// Handed off: claimed in the insert. Its worker and claim token are its runner's.
			jobs[i].Attempt, jobs[i].StartedAt = 1, times[i][0]
		} else if handable[i] && !passedOver[i] {
			s.handoff.missed(rows[i].p.Queue, rows[i].p.Kind, now)
		}
	}
	return jobs, nil
}

// insertRows sends one INSERT per job and then the notifications notes as a single pipelined batch.
func (s *Store) insertRows(ctx context.Context, db batchSender, rows []insertRow, notes []string) ([]*store.Job, error) {
	return s.insertRowsThen(ctx, db, rows, nil, func(b *pgx.Batch) {
		for _, n := range notes {
			b.Queue(s.q.notify, n)
		}
	})
}

// insertRowsThen sends one INSERT per job and then the statements queued by then as a single
// pipelined batch, all in the savepoint sp of db's transaction when sp is not nil.
func (s *Store) insertRowsThen(ctx context.Context, db batchSender, rows []insertRow, sp *txBounds, then func(*pgx.Batch)) ([]*store.Job, error) {
	b := &pgx.Batch{}
	if sp != nil {
		b.Queue(sp.begin)
	}
	head := b.Len()
	for i := range rows {
		r := &rows[i]
		b.Queue(s.q.insertJob, r.args(r.state, r.p.ScheduledAt)...)
	}
	then(b)
	if sp != nil {
		b.Queue(sp.commit)
	}
	tail := b.Len() - head - len(rows)
	br := db.SendBatch(ctx, b)
	for range head {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		var createdAt, scheduledAt time.Time
		if err := br.QueryRow().Scan(&createdAt, &scheduledAt); err != nil {
			_ = br.Close()
			return nil, err
		}
		jobs[i] = jobFromInsert(&rows[i], rows[i].state, createdAt, scheduledAt)
	}
	for range tail {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// copier is what a connection and a transaction offer for COPY.
type copier interface {
	batchSender
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// insertCopyPool writes the jobs with COPY in a transaction of its own on a pool connection, in
// three round trips: BEGIN with the transaction's timestamp, the COPY, then the notifications with
// COMMIT.
func (s *Store) insertCopyPool(ctx context.Context, rows []insertRow) ([]*store.Job, error) {
	now, err := s.copyPool(ctx, rows)
	if err != nil {
		return nil, err
	}
	return jobsFromCopy(rows, now), nil
}

// copyPool is insertCopyPool without building the jobs: it returns the transaction's timestamp,
// which every row took as created_at.
func (s *Store) copyPool(ctx context.Context, rows []insertRow) (now time.Time, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return now, err
	}
	defer pc.Release()
	conn := pc.Conn()
	defer func() {
		// Whatever failed, leave no transaction open on the connection (the pool would discard it).
		if conn.PgConn().TxStatus() != 'I' && !conn.IsClosed() {
			_, _ = conn.Exec(context.WithoutCancel(ctx), sqlRollback)
		}
	}()

	b := &pgx.Batch{}
	b.Queue(sqlBegin)
	b.Queue(s.q.now).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	s.queueHolds(b, rows)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return now, err
	}
	if err := s.copyRows(ctx, conn, rows, now); err != nil {
		return now, err
	}
	b = &pgx.Batch{}
	for _, n := range insertNotifications(rows, time.Now()) {
		b.Queue(s.q.notify, n)
	}
	var tag pgconn.CommandTag
	b.Queue(sqlCommit).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return now, err
	}
	if tag.String() != "COMMIT" {
		return now, errors.New("commit: the transaction was rolled back")
	}
	return now, nil
}

// insertCopy writes the jobs with COPY inside the caller's transaction tx, in the savepoint
// insertSavepoint, then announces them (PostgreSQL delivers the notifications when tx commits). The
// savepoint takes no round trip of its own: it is opened in the batch that reads the transaction's
// timestamp, and released in the one that sends the notifications.
func (s *Store) insertCopy(ctx context.Context, tx copier, rows []insertRow) ([]*store.Job, error) {
	var now time.Time
	b := &pgx.Batch{}
	b.Queue(insertSavepoint.begin)
	b.Queue(s.q.now).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	s.queueHolds(b, rows)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if err := s.copyRows(ctx, tx, rows, now); err != nil {
		return nil, err
	}
	b = &pgx.Batch{}
	for _, n := range insertNotifications(rows, time.Now()) {
		b.Queue(s.q.notify, n)
	}
	b.Queue(insertSavepoint.commit)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return jobsFromCopy(rows, now), nil
}

// copyInTx writes the jobs with COPY inside transaction tx, at its timestamp.
func (s *Store) copyInTx(ctx context.Context, tx copier, rows []insertRow) ([]*store.Job, error) {
	var now time.Time
	b := &pgx.Batch{}
	b.Queue(s.q.now).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	s.queueHolds(b, rows)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if err := s.copyRows(ctx, tx, rows, now); err != nil {
		return nil, err
	}
	return jobsFromCopy(rows, now), nil
}

// notifyAll sends the notifications notes in tx: one statement, or one pipelined batch.
func (s *Store) notifyAll(ctx context.Context, tx copier, notes []string) error {
	switch len(notes) {
	case 0:
	case 1:
		if _, err := tx.Exec(ctx, s.q.notify, notes[0]); err != nil {
			return err
		}
	default:
		b := &pgx.Batch{}
		for _, n := range notes {
			b.Queue(s.q.notify, n)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	return nil
}

// queueHolds queues on b, when rows carry rate keys, the read of the keys a limit bounds, and marks
// their rows held for COPY (see heldAtInsert). Queued after the batch's own limits are written, it
// sees them; without rate keys it queues nothing.
func (s *Store) queueHolds(b *pgx.Batch, rows []insertRow) {
	seen := map[string]bool{}
	var keys []string
	for i := range rows {
		if k := rows[i].p.RateKey; k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	b.Queue(s.q.boundKeys, keys).QueryRow(func(row pgx.Row) error {
		var bound []string
		if err := row.Scan(&bound); err != nil {
			return err
		}
		clear(seen)
		for _, k := range bound {
			seen[k] = true
		}
		for i := range rows {
			rows[i].held = rows[i].p.RateKey != "" && seen[rows[i].p.RateKey]
		}
		return nil
	})
}

// copyRows COPYs the rows into the jobs table. Rows take the transaction's timestamp now as
// created_at (and as scheduled_at when not given), exactly what now() would give them.
//
// A column in which every row holds the column's default (see copyDefault) is left out of the COPY
// and takes that default: a batch of plain jobs sends the five columns that carry something, not 22,
// and pgx encodes, and PostgreSQL reads, a quarter of the values.
func (s *Store) copyRows(ctx context.Context, db copier, rows []insertRow, now time.Time) error {
	var cols []int
	var names []string
	for c, name := range copyColumns {
		if isDefault := copyDefault[c]; isDefault != nil && allRows(rows, isDefault) {
			continue
		}
		cols = append(cols, c)
		names = append(names, name)
	}
	src := &copySource{rows: rows, now: now, pos: -1, vals: make([]any, len(copyColumns)), cols: cols,
		out: make([]any, len(cols))}
	_, err := db.CopyFrom(ctx, s.jobsTable, names, src)
	return err
}

// copyDefault tells, for the columns of copyColumns that have one, whether a row holds the column's
// default (nil: the column is always sent). created_at always does: its default, now(), is the
// transaction's timestamp, which copyRows writes.
var copyDefault = [...]func(r *insertRow) bool{
	4:  func(r *insertRow) bool { return len(r.p.Meta) == 0 },
	5:  func(r *insertRow) bool { return r.p.Priority == 0 },
	6:  func(r *insertRow) bool { return r.state == store.StateAvailable },
	7:  func(r *insertRow) bool { return r.p.MaxAttempts == 1 },
	8:  func(r *insertRow) bool { return len(r.tags) == 0 },
	9:  func(r *insertRow) bool { return len(r.p.RetryPolicy) == 0 },
	10: func(r *insertRow) bool { return r.p.Timeout.Milliseconds() == 0 },
	11: func(*insertRow) bool { return true },
	12: func(r *insertRow) bool { return r.p.ScheduledAt.IsZero() },
	13: func(r *insertRow) bool { return r.p.ExpiresAt.IsZero() },
	14: func(r *insertRow) bool { return r.p.UniqueKey == "" },
	15: func(r *insertRow) bool { return r.p.Tenant == "" },
	16: func(r *insertRow) bool { return r.p.RateKey == "" },
	17: func(r *insertRow) bool { return r.p.WorkflowID == "" },
	18: func(r *insertRow) bool { return r.parentIDs == nil },
	19: func(r *insertRow) bool { return r.p.UniqueKey == "" },
	20: func(r *insertRow) bool { return !r.uniqueUntil().Valid },
	21: func(r *insertRow) bool { return r.p.RunOn == "" },
	22: func(r *insertRow) bool { return !r.held },
}

// allRows reports whether f holds for every row.
func allRows(rows []insertRow, f func(*insertRow) bool) bool {
	for i := range rows {
		if !f(&rows[i]) {
			return false
		}
	}
	return true
}

// jobsFromCopy builds the jobs a COPY wrote at the transaction timestamp now.
func jobsFromCopy(rows []insertRow, now time.Time) []*store.Job {
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		scheduledAt := rows[i].p.ScheduledAt
		if scheduledAt.IsZero() {
			scheduledAt = now
		}
		jobs[i] = jobFromInsert(&rows[i], rows[i].state, now, scheduledAt.Truncate(time.Microsecond))
	}
	return jobs
}

// copySource feeds insert rows to CopyFrom, reusing its value slices.
type copySource struct {
	rows []insertRow
	now  time.Time
	pos  int
	vals []any
	cols []int // the indexes in copyColumns of the columns sent
	out  []any
}

// Next advances to the next row.
func (c *copySource) Next() bool {
	c.pos++
	return c.pos < len(c.rows)
}

// Values returns the current row in copyColumns order.
func (c *copySource) Values() ([]any, error) {
	r := &c.rows[c.pos]
	p := r.p
	scheduledAt := p.ScheduledAt
	if scheduledAt.IsZero() {
		scheduledAt = c.now
	}
	v := c.vals
	v[0], v[1], v[2], v[3], v[4] = r.id, p.Kind, p.Queue, argsOrEmpty(p.Args), nullJSON(p.Meta)
	v[5], v[6], v[7], v[8] = int32(p.Priority), string(r.state), int32(p.MaxAttempts), r.tags
	v[9], v[10], v[11], v[12] = nullJSON(p.RetryPolicy), p.Timeout.Milliseconds(), c.now, scheduledAt
	v[13], v[14], v[15] = nullTime(p.ExpiresAt), nullText(p.UniqueKey), nullText(p.Tenant)
	v[16], v[17], v[18] = nullText(p.RateKey), nullText(p.WorkflowID), r.parentIDs
	v[19], v[20], v[21] = r.featureArgs()
	v[22] = nil
	if r.held {
		v[22] = true
	}
	for k, col := range c.cols {
		c.out[k] = v[col]
	}
	return c.out, nil
}

// Err reports no error: the rows were validated beforehand.
func (c *copySource) Err() error { return nil }

// insertNotifications returns one insert payload per queue with claimable or scheduled jobs, in
// order of first appearance. A queue's due time is zero when any of its jobs is due now, otherwise
// the earliest due time. Pending jobs announce nothing.
func insertNotifications(rows []insertRow, now time.Time) []string {
	return queueNotifications(len(rows), func(i int) (string, store.State, time.Time, bool) {
		r := &rows[i]
		return r.p.Queue, r.state, r.p.ScheduledAt, true
	}, now)
}

// queueNotifications returns one insert payload per queue among n jobs, job i being in queue, in
// state, due at scheduledAt, and counted only when include. A queue's due time is zero when any
// of its jobs is available or due by now, otherwise the earliest due time. Pending jobs (and
// jobs in no claimable state) announce nothing.
func queueNotifications(n int, job func(i int) (queue string, state store.State, scheduledAt time.Time, include bool), now time.Time) []string {
	type due struct {
		queue string
		at    time.Time // zero: due now
	}
	var queues []due
	index := map[string]int{}
	for i := range n {
		queue, state, at, include := job(i)
		switch {
		case !include:
			continue
		case state != store.StateAvailable && state != store.StateScheduled && state != store.StateRetryable:
			continue
		case state == store.StateAvailable || !at.After(now):
			at = time.Time{}
		}
		k, ok := index[queue]
		if !ok {
			index[queue] = len(queues)
			queues = append(queues, due{queue: queue, at: at})
			continue
		}
		q := &queues[k]
		if !q.at.IsZero() && (at.IsZero() || at.Before(q.at)) {
			q.at = at
		}
	}
	out := make([]string, len(queues))
	for i, q := range queues {
		out[i] = insertPayload(q.queue, q.at)
	}
	return out
}

// args returns the parameters of sqlInsertJob and sqlInsertUnique for the row, inserted in state
// at scheduledAt (zero: now).
func (r *insertRow) args(state store.State, scheduledAt time.Time) []any {
	p := r.p
	states, until, runOn := r.featureArgs()
	return []any{r.id, p.Kind, p.Queue, argsOrEmpty(p.Args), nullJSON(p.Meta), p.Priority,
		string(state), p.MaxAttempts, r.tags, nullJSON(p.RetryPolicy), p.Timeout.Milliseconds(),
		nullTime(scheduledAt), nullTime(p.ExpiresAt), nullText(p.UniqueKey), nullText(p.Tenant),
		nullText(p.RateKey), nullText(p.WorkflowID), r.parentIDs, states, until, runOn}
}

// Boxed NULLs for the columns of unique jobs and workflow callbacks, which most jobs leave empty:
// writing them allocates nothing.
var (
	nullStatesArg any = []string(nil)
	nullTimeArg   any = pgtype.Timestamptz{}
	nullTextArg   any = pgtype.Text{}
)

// featureArgs returns the row's unique_states, unique_until and run_on parameters.
func (r *insertRow) featureArgs() (states, until, runOn any) {
	states, until, runOn = nullStatesArg, nullTimeArg, nullTextArg
	if r.p.UniqueKey != "" {
		states, until = r.uniqueStates, r.uniqueUntil()
	}
	if r.p.RunOn != "" {
		runOn = string(r.p.RunOn)
	}
	return states, until, runOn
}

// uniqueUntil is the row's unique_until: NULL without a key or a period.
func (r *insertRow) uniqueUntil() pgtype.Timestamptz {
	if r.p.UniqueKey == "" {
		return pgtype.Timestamptz{}
	}
	return nullTime(r.p.UniqueUntil)
}

// jobFromInsert builds the job inserted in state from its params and the timestamps the database
// assigned.
func jobFromInsert(r *insertRow, state store.State, createdAt, scheduledAt time.Time) *store.Job {
	p := r.p
	j := &store.Job{
		ID:          formatUUID(r.id.Bytes),
		Kind:        p.Kind,
		Queue:       p.Queue,
		Args:        argsOrEmpty(p.Args),
		Meta:        nullJSON(p.Meta),
		Priority:    p.Priority,
		State:       state,
		MaxAttempts: p.MaxAttempts,
		RetryPolicy: nullJSON(p.RetryPolicy),
		Timeout:     p.Timeout.Truncate(time.Millisecond),
		CreatedAt:   createdAt,
		ScheduledAt: scheduledAt,
		ExpiresAt:   p.ExpiresAt.Truncate(time.Microsecond),
		UniqueKey:   p.UniqueKey,
		Tenant:      p.Tenant,
		RateKey:     p.RateKey,
		WorkflowID:  p.WorkflowID,
		RunOn:       p.RunOn,
	}
	if len(r.uniqueStates) > 0 {
		j.UniqueStates = make([]store.State, len(r.uniqueStates))
		for i, st := range r.uniqueStates {
			j.UniqueStates[i] = store.State(st)
		}
		j.UniqueUntil = r.uniqueUntil().Time.Truncate(time.Microsecond)
	}
	if len(p.Tags) > 0 {
		j.Tags = append([]string(nil), p.Tags...)
	}
	if len(p.ParentIDs) > 0 {
		j.ParentIDs = make([]string, len(r.parentIDs))
		for i, u := range r.parentIDs {
			j.ParentIDs[i] = formatUUID(u.Bytes)
		}
	}
	return j
}

// argsOrEmpty stores missing args as the empty JSON array.
func argsOrEmpty(args []byte) []byte {
	if len(args) == 0 {
		return emptyArgs
	}
	return args
}

var emptyArgs = []byte("[]")

// insertError wraps a unique violation as store.ErrDuplicate.
func insertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation {
		return fmt.Errorf("insert jobs: %w: %s", store.ErrDuplicate, pgErr.Detail)
	}
	return fmt.Errorf("insert jobs: %w", err)
}

// isUniqueViolation reports whether err is PostgreSQL's unique constraint violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation
}
