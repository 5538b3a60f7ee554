package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/store"
)

// maxUniqueAttempts bounds how often one unique insert goes round its loop: each turn follows a
// change another transaction made to the key's holder between two statements (it left its states,
// it was replaced), so only a key changing hands continuously exhausts it.
const maxUniqueAttempts = 20

// uniqueIndex is the name of the unique index over held keys, as PostgreSQL reports it.
const uniqueIndex = "jobs_unique_idx"

// txBounds are the statements that open, close and undo the transaction of a special insert: a
// transaction of its own on a pool connection, or a savepoint of the application's transaction.
type txBounds struct {
	begin, commit, rollback string
	// committed is the command tag of commit when it succeeded.
	committed string
}

var (
	ownTransaction = txBounds{sqlBegin, sqlCommit, sqlRollback, "COMMIT"}
	// Its rollback releases the savepoint too (run with no arguments, as one simple-protocol
	// message): one left behind would be what a later insert's rollback went back to.
	insertSavepoint = txBounds{`SAVEPOINT pronto_insert`, `RELEASE SAVEPOINT pronto_insert`,
		`ROLLBACK TO SAVEPOINT pronto_insert; RELEASE SAVEPOINT pronto_insert`, "RELEASE"}
)

// insertSpecialPool runs insertSpecial in a transaction of its own on a connection of the pool.
func (s *Store) insertSpecialPool(ctx context.Context, rows []insertRow) ([]*store.Job, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer pc.Release()
	return s.insertSpecial(ctx, pc.Conn(), rows, ownTransaction)
}

// insertSpecial inserts a batch with unique jobs or rate limits on db, between bounds, in two round
// trips when no unique job meets a holder:
//
//  1. Opening the transaction, the batch writes the rate limits it carries (in key order, the last
//     one given for a key winning), inserts the jobs without a unique key (pipelined, or with COPY
//     right after for a large batch) and tries every unique job with INSERT ... ON CONFLICT DO
//     NOTHING, in key order: two batches that share keys take them in the same order and cannot
//     deadlock, and jobs with one key meet each other in the order given. A key that a job of the
//     batch takes outside its unique states waits for step 2.
//  2. Each unique job that met a holder resolves the conflict as its policy says (insertUnique),
//     in the same order. A reject fails the whole call. An earlier job of the batch that a later
//     one replaced is returned as it is then, cancelled.
//  3. Closing the transaction, the batch announces the queues of the jobs inserted and tells the
//     runners of the active jobs it replaced.
//
// Whatever fails, the transaction (or savepoint) is undone before it returns.
func (s *Store) insertSpecial(ctx context.Context, db copier, rows []insertRow, bounds txBounds) ([]*store.Job, error) {
	done := false
	defer func() {
		if !done {
			_, _ = db.Exec(context.WithoutCancel(ctx), bounds.rollback)
		}
	}()
	jobs := make([]*store.Job, len(rows))
	var plain, unique []int
	for i := range rows {
		if rows[i].p.UniqueKey == "" {
			plain = append(plain, i)
		} else {
			unique = append(unique, i)
		}
	}
	slices.SortStableFunc(unique, func(a, b int) int { return strings.Compare(rows[a].p.UniqueKey, rows[b].p.UniqueKey) })
	copied := len(plain) > pipelineMax

	var now time.Time
	met := make([]bool, len(rows)) // unique jobs whose first insert met a holder
	b := &pgx.Batch{}
	b.Queue(bounds.begin)
	b.Queue(s.q.now).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	queueLimits(b, s.q.upsertRateLimit, rows)
	if copied {
		s.queueHolds(b, rows)
	}
	if !copied {
		for _, i := range plain {
			r := &rows[i]
			b.Queue(s.q.insertJob, r.args(r.state, r.p.ScheduledAt)...).QueryRow(func(row pgx.Row) error {
				var createdAt, scheduledAt time.Time
				if err := row.Scan(&createdAt, &scheduledAt); err != nil {
					return err
				}
				jobs[i] = jobFromInsert(r, r.state, createdAt, scheduledAt)
				return nil
			})
		}
	}
	// A key that a job of the batch takes outside its unique states is settled job by job, in the
	// order given (insertUnique): the index, which such a job does not enter, cannot meet the holder
	// for it.
	var settled map[string]bool
	for _, i := range unique {
		if r := &rows[i]; !r.holdsIn(r.state) {
			if settled == nil {
				settled = map[string]bool{}
			}
			settled[r.p.UniqueKey] = true
		}
	}
	for _, i := range unique {
		r := &rows[i]
		if settled[r.p.UniqueKey] {
			met[i] = true
			continue
		}
		b.Queue(s.q.insertUnique, r.args(r.state, r.p.ScheduledAt)...).Query(func(res pgx.Rows) error {
			if !res.Next() {
				met[i] = true
				return res.Err()
			}
			var createdAt, scheduledAt time.Time
			if err := res.Scan(&createdAt, &scheduledAt); err != nil {
				return err
			}
			jobs[i] = jobFromInsert(r, r.state, createdAt, scheduledAt)
			return nil
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if copied {
		plainRows := make([]insertRow, len(plain))
		for k, i := range plain {
			plainRows[k] = rows[i]
		}
		if err := s.copyRows(ctx, db, plainRows, now); err != nil {
			return nil, err
		}
		for k, j := range jobsFromCopy(plainRows, now) {
			jobs[plain[k]] = j
		}
	}

	var notes []string
	for _, i := range unique {
		if !met[i] {
			continue
		}
		out, err := s.insertUnique(ctx, db, &rows[i])
		if err != nil {
			return nil, err
		}
		jobs[i] = out.job
		notes = append(notes, out.notes...)
		for _, h := range out.replaced {
			// An earlier job of this batch that a later one replaced is returned as it is now.
			if k := slices.IndexFunc(jobs, func(j *store.Job) bool { return j != nil && !j.Duplicate && j.ID == h.ID }); k >= 0 {
				h.Replaced = jobs[k].Replaced
				jobs[k] = h
			}
		}
	}

	b = &pgx.Batch{}
	for _, n := range append(notes, jobNotifications(jobs, time.Now())...) {
		b.Queue(s.q.notify, n)
	}
	var tag pgconn.CommandTag
	b.Queue(bounds.commit).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if tag.String() != bounds.committed {
		return nil, errors.New("commit: the transaction was rolled back")
	}
	done = true
	return jobs, nil
}

// holdsIn reports whether the row's job holds its unique key in state.
func (r *insertRow) holdsIn(state store.State) bool {
	return slices.Contains(r.uniqueStates, string(state))
}

// queueLimits queues on b the upserts (sql) of the rate limits the rows carry, in key order (one
// lock order for every writer), the last one given for a key winning.
func queueLimits(b *pgx.Batch, sql string, rows []insertRow) {
	limits := map[string]store.RateLimit{}
	for i := range rows {
		if l := rows[i].p.RateLimit; l != nil {
			limits[rows[i].p.RateKey] = *l
		}
	}
	for _, k := range slices.Sorted(maps.Keys(limits)) {
		b.Queue(sql, rateLimitArgs(k, limits[k])...)
	}
}

// uniqueOutcome is what insertUnique did.
type uniqueOutcome struct {
	// job is the job inserted, or the holder returned in its place (Duplicate set).
	job *store.Job
	// replaced are the holders the job replaced, as they are now; the job's Replaced holds those it
	// cancelled as they were before.
	replaced []*store.Job
	// notes are the cancel notifications of the replaced holders that were active.
	notes []string
}

// insertUnique inserts one unique job in the transaction open on tx. INSERT ... ON CONFLICT DO
// NOTHING against jobs_unique_idx either inserts it or finds the key held; the holder is then
// locked and the conflict resolved:
//
//   - a holder whose UniqueUntil has passed gives its key up, and the insert is tried again;
//   - reject: a *store.UniqueConflictError, which fails the whole batch;
//   - ignore: the holder is returned in the job's place, marked Duplicate;
//   - replace: the holder is cancelled (and keeps no hold), and the insert is tried again;
//   - replace_except_schedule: the same, the new job taking over a scheduled or retryable holder's
//     state and due time.
//
// A holder that left its states between the insert and the lock (finished, cancelled elsewhere)
// is no longer found, and the insert is tried again. The index serializes concurrent inserts of a
// key: an insert that meets another transaction's uncommitted holder waits for its outcome.
//
// A job inserted outside its unique states (scheduled with a delay, pending) does not enter the
// index, so it looks for the holder first and is written only when none is left. It holds nothing
// yet, so a holder committed meanwhile by another transaction is no conflict: that insert simply
// came second.
func (s *Store) insertUnique(ctx context.Context, tx copier, r *insertRow) (uniqueOutcome, error) {
	p := r.p
	state, scheduledAt := r.state, p.ScheduledAt
	var out uniqueOutcome
	var cancelled []*store.Job // the holders replaced, as they were before (store.Job.Replaced)
	for range maxUniqueAttempts {
		var createdAt, dueAt time.Time
		inside := r.holdsIn(state)
		if inside {
			err := tx.QueryRow(ctx, s.q.insertUnique, r.args(state, scheduledAt)...).Scan(&createdAt, &dueAt)
			if err == nil {
				out.job = jobFromInsert(r, state, createdAt, dueAt)
				out.job.Replaced = cancelled
				return out, nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return out, err
			}
		}
		var (
			lapsed bool
			hr     jobRow
		)
		err := tx.QueryRow(ctx, s.q.uniqueHolder, p.UniqueKey).Scan(append([]any{&lapsed}, hr.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			if inside {
				continue // the holder left its states meanwhile
			}
			if err := tx.QueryRow(ctx, s.q.insertJob, r.args(state, scheduledAt)...).Scan(&createdAt, &dueAt); err != nil {
				return out, err
			}
			out.job = jobFromInsert(r, state, createdAt, dueAt)
			out.job.Replaced = cancelled
			return out, nil
		}
		if err != nil {
			return out, err
		}
		holder, err := hr.job()
		if err != nil {
			return out, err
		}
		if lapsed {
			if _, err := tx.Exec(ctx, s.q.uniqueRelease, hr.id); err != nil {
				return out, err
			}
			continue
		}
		switch p.OnConflict {
		case "", store.ConflictReject:
			return out, &store.UniqueConflictError{Key: p.UniqueKey, ExistingID: holder.ID, ExistingState: holder.State}
		case store.ConflictIgnore:
			holder.Duplicate = true
			out.job = holder
			return out, nil
		case store.ConflictReplaceExceptSchedule:
			if holder.State == store.StateScheduled || holder.State == store.StateRetryable {
				state, scheduledAt = holder.State, holder.ScheduledAt
			}
		}
		var cr jobRow
		if err := tx.QueryRow(ctx, s.q.uniqueReplace, hr.id).Scan(cr.dest()...); err != nil {
			return out, err
		}
		replaced, err := cr.job()
		if err != nil {
			return out, err
		}
		out.replaced = append(out.replaced, replaced)
		if !holder.State.Terminal() { // a terminal holder only gave its key up
			cancelled = append(cancelled, holder)
		}
		if holder.State == store.StateActive {
			out.notes = append(out.notes, cancelPayload(holder.ID, holder.ClaimToken))
		}
	}
	return out, fmt.Errorf("job %s: unique key %q changed hands %d times while it was inserted; try again",
		p.ID, p.UniqueKey, maxUniqueAttempts)
}

// jobNotifications returns one insert payload per queue of the jobs inserted (not the duplicates
// returned in their place), as insertNotifications does for rows.
func jobNotifications(jobs []*store.Job, now time.Time) []string {
	return queueNotifications(len(jobs), func(i int) (string, store.State, time.Time, bool) {
		j := jobs[i]
		return j.Queue, j.State, j.ScheduledAt, !j.Duplicate
	}, now)
}

// uniqueConflict turns a manual transition's violation of jobs_unique_idx into a
// *store.UniqueConflictError naming the job that holds the key; other errors are returned as
// they are. A holder whose period ran out gives its key up instead, and retry reports that the
// transition may be tried again.
func (s *Store) uniqueConflict(ctx context.Context, id pgtype.UUID, err error) (retry bool, _ error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgUniqueViolation || pgErr.ConstraintName != uniqueIndex {
		return false, err
	}
	var (
		holder pgtype.UUID
		state  string
		key    string
		lapsed bool
	)
	if qerr := s.pool.QueryRow(ctx, s.q.uniqueConflict, id).Scan(&holder, &state, &key, &lapsed); qerr != nil {
		if errors.Is(qerr, pgx.ErrNoRows) {
			return true, err // the holder left its states meanwhile
		}
		return false, fmt.Errorf("%w: %w", store.ErrUniqueConflict, err)
	}
	if lapsed {
		if _, rerr := s.pool.Exec(ctx, s.q.uniqueRelease, holder); rerr != nil {
			return false, rerr
		}
		return true, err
	}
	return false, &store.UniqueConflictError{Key: key, ExistingID: formatUUID(holder.Bytes), ExistingState: store.State(state)}
}
