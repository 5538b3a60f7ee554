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

// insertInTx inserts a batch with unique jobs or rate limits inside tx:
//
//  1. The rate limits the batch carries are written, in key order (the last one given for a key
//     wins).
//  2. The jobs without a unique key are inserted together, pipelined or with COPY.
//  3. The unique jobs are inserted one by one, each resolving a conflict with the key's holder as
//     its policy says (see insertUnique). A reject fails the whole call. They go in key order (in
//     the order given among jobs with one key, which meet each other like any two jobs), so two
//     batches that share keys take them in the same order and cannot deadlock.
//  4. The queues of the jobs inserted are announced, and the runners of replaced active jobs told.
//
// The notifications are delivered when tx commits.
func (s *Store) insertInTx(ctx context.Context, tx pgx.Tx, rows []insertRow) ([]*store.Job, error) {
	if err := s.writeLimits(ctx, tx, rows); err != nil {
		return nil, err
	}
	jobs := make([]*store.Job, len(rows))
	var plain []insertRow
	var plainAt []int
	for i := range rows {
		if rows[i].p.UniqueKey == "" {
			plain = append(plain, rows[i])
			plainAt = append(plainAt, i)
		}
	}
	if len(plain) > 0 {
		var inserted []*store.Job
		var err error
		if len(plain) < copyThreshold {
			inserted, err = s.insertRows(ctx, tx, plain, nil)
		} else {
			inserted, err = s.copyInTx(ctx, tx, plain)
		}
		if err != nil {
			return nil, err
		}
		for k, i := range plainAt {
			jobs[i] = inserted[k]
		}
	}
	var unique []int
	for i := range rows {
		if rows[i].p.UniqueKey != "" {
			unique = append(unique, i)
		}
	}
	slices.SortStableFunc(unique, func(a, b int) int { return strings.Compare(rows[a].p.UniqueKey, rows[b].p.UniqueKey) })
	var notes []string
	for _, i := range unique {
		j, cancelled, err := s.insertUnique(ctx, tx, &rows[i])
		if err != nil {
			return nil, err
		}
		jobs[i] = j
		notes = append(notes, cancelled...)
	}
	notes = append(notes, jobNotifications(jobs, time.Now())...)
	if err := s.notifyAll(ctx, tx, notes); err != nil {
		return nil, err
	}
	return jobs, nil
}

// writeLimits creates or replaces the rate limits the rows carry.
func (s *Store) writeLimits(ctx context.Context, tx pgx.Tx, rows []insertRow) error {
	limits := map[string]store.RateLimit{}
	for i := range rows {
		if l := rows[i].p.RateLimit; l != nil {
			limits[rows[i].p.RateKey] = *l
		}
	}
	if len(limits) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, k := range slices.Sorted(maps.Keys(limits)) { // one lock order for every writer
		b.Queue(s.q.upsertRateLimit, rateLimitArgs(k, limits[k])...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write rate limits: %w", err)
	}
	return nil
}

// insertUnique inserts one unique job in tx. INSERT ... ON CONFLICT DO NOTHING against
// jobs_unique_idx either inserts it or finds the key held; the holder is then locked and the
// conflict resolved:
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
// It returns the job, and the cancel notifications of the active jobs it replaced.
func (s *Store) insertUnique(ctx context.Context, tx pgx.Tx, r *insertRow) (*store.Job, []string, error) {
	p := r.p
	state, scheduledAt := r.state, p.ScheduledAt
	var notes []string
	for range maxUniqueAttempts {
		var createdAt, dueAt time.Time
		err := tx.QueryRow(ctx, s.q.insertUnique, r.args(state, scheduledAt)...).Scan(&createdAt, &dueAt)
		if err == nil {
			return jobFromInsert(r, state, createdAt, dueAt), notes, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, err
		}
		var (
			lapsed bool
			hr     jobRow
		)
		err = tx.QueryRow(ctx, s.q.uniqueHolder, p.UniqueKey).Scan(append([]any{&lapsed}, hr.dest()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the holder left its states meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		holder, err := hr.job()
		if err != nil {
			return nil, nil, err
		}
		if lapsed {
			if _, err := tx.Exec(ctx, s.q.uniqueRelease, hr.id); err != nil {
				return nil, nil, err
			}
			continue
		}
		switch p.OnConflict {
		case "", store.ConflictReject:
			return nil, nil, &store.UniqueConflictError{Key: p.UniqueKey, ExistingID: holder.ID, ExistingState: holder.State}
		case store.ConflictIgnore:
			holder.Duplicate = true
			return holder, notes, nil
		case store.ConflictReplaceExceptSchedule:
			if holder.State == store.StateScheduled || holder.State == store.StateRetryable {
				state, scheduledAt = holder.State, holder.ScheduledAt
			}
		}
		if _, err := tx.Exec(ctx, s.q.uniqueReplace, hr.id); err != nil {
			return nil, nil, err
		}
		if holder.State == store.StateActive {
			notes = append(notes, cancelPayload(holder.ID))
		}
	}
	return nil, nil, fmt.Errorf("job %s: unique key %q changed hands %d times while it was inserted; try again",
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
// they are.
func (s *Store) uniqueConflict(ctx context.Context, id any, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgUniqueViolation || pgErr.ConstraintName != uniqueIndex {
		return err
	}
	var (
		holder pgtype.UUID
		state  string
		key    string
	)
	if qerr := s.pool.QueryRow(ctx, s.q.uniqueConflict, id).Scan(&holder, &state, &key); qerr != nil {
		return fmt.Errorf("%w: %w", store.ErrUniqueConflict, err)
	}
	return &store.UniqueConflictError{Key: key, ExistingID: formatUUID(holder.Bytes), ExistingState: store.State(state)}
}
