package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/store"
)

// defaultMaintenanceLimit bounds one maintenance pass (Promote, DiscardExpired, Rescue, Cleanup)
// when the caller gives no positive limit.
const defaultMaintenanceLimit = 1000

// Claim moves up to p.Limit claimable jobs of p.Queue to active for p.WorkerID in one statement
// (FOR UPDATE SKIP LOCKED, so concurrent claimers never take the same job), sent in one round trip
// with the planner setting that pins its plan, and returns them in claim order: highest priority
// first, then earliest due, then lowest id.
//
// That statement leaves jobs with a rate key alone, and the round trip also tells whether the
// queue has claimable ones (an index probe that costs nothing when there are none). When it has,
// the plain claim takes nothing and a second round trip runs claim_limited, which enforces the
// stored limits while taking limited and unlimited jobs together in claim order.
//
// A claim for several workers (p.WorkerIDs) records their ids in the same statement on the plain
// path; the other paths record the first entry on every job, then the others in a second statement.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	return store.ClaimThenReassign(ctx, s, p, s.claim, s.reassignWorkers)
}

// reassignWorkers records the worker ids of claimed jobs, each still active under its claim token,
// in one statement.
func (s *Store) reassignWorkers(ctx context.Context, jobs []*store.Job) error {
	ids, workers, tokens := make([]string, len(jobs)), make([]string, len(jobs)), make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], workers[i], tokens[i] = j.ID, j.WorkerID, j.ClaimToken
	}
	_, err := s.pool.Exec(ctx, s.q.reassignWorkers, ids, workers, tokens)
	return err
}

func (s *Store) claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	var w *waiter
	var gen uint64
	var handed []*store.Job
	if len(p.WorkerIDs) == 0 && producer.InLoop(ctx) {
		if w, gen = s.handoff.waiterGen(&p); w != nil {
			// Jobs handed to this producer by inserts (handoff.go): no round trip.
			handed = w.take(p.Limit)
			// A queue notification since the last claim may announce jobs no hand-off took (an
			// insert of more jobs than the producer had slots advertised, another process's
			// insert): the producer, whose claim comes back short, would not claim again before
			// the next notification, so claim them now.
			// So is a claim once the advertisement runs low (waiter.adFree).
			if len(handed) == p.Limit || (len(handed) > 0 && !w.notified.Swap(false) && !w.adLow()) {
				return handed, nil
			}
			p.Limit -= len(handed)
		}
	}
	if len(handed) > 0 {
		jobs, err := s.claimPlain(ctx, p, w, gen)
		if err != nil {
			// The handed jobs are claimed already: run them; the producer's poll claims again.
			s.log.Warn("pronto: claim after a hand-off", "schema", s.schema, "queue", p.Queue, "error", err)
			return handed, nil
		}
		return append(handed, jobs...), nil
	}
	return s.claimPlain(ctx, p, w, gen)
}

// claimPlain claims as Claim describes, advertising w's producer when w is not nil (the claim
// begun in generation gen, see waiterGen).
func (s *Store) claimPlain(ctx context.Context, p store.ClaimParams, w *waiter, gen uint64) ([]*store.Job, error) {
	if w != nil {
		w.notified.Store(false)
	}
	if _, ok := s.fairQueues.Load(p.Queue); ok {
		jobs, mode, err := s.claimFair(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
		}
		if mode == "fair" && slices.ContainsFunc(jobs, func(j *store.Job) bool { return j.Tenant != "" }) {
			return jobs, nil
		}
		s.fairQueues.Delete(p.Queue) // no tenant job claimed: the plain claim decides again
		if mode == "fair" && len(jobs) > 0 {
			return jobs, nil
		}
	}
	tag := newClaimTag()
	b := &pgx.Batch{}
	b.Queue(s.q.claimPlan, p.Queue, tag)
	if w != nil {
		// The claim also advertises the producer when it leaves slots free.
		sql, args := w.claimArgs(s.q, p.Limit)
		b.Queue(sql, args...)
	} else if len(p.Kinds) == 0 && len(p.WorkerIDs) > 0 {
		b.Queue(s.q.claimFor, p.Queue, p.Limit, p.LeaseDuration.Microseconds(), p.WorkerID, p.WorkerIDs)
	} else if len(p.Kinds) == 0 {
		b.Queue(s.q.claim, p.Queue, p.Limit, p.LeaseDuration.Microseconds(), p.WorkerID)
	} else {
		b.Queue(s.q.claimKinds, p.Queue, p.Limit, p.LeaseDuration.Microseconds(), p.WorkerID, p.Kinds)
	}
	var jobs []*store.Job
	var mode string
	err := s.sendClaim(ctx, &p, tag, b, func(br pgx.BatchResults) (err error) {
		jobs, mode, err = claimResults(br)
		return err
	})
	if w != nil {
		if err == nil {
			w.advertised(max(p.Limit-len(jobs), 0))
		}
		// A failed claim may have advertised too: its statement can commit before the error.
		s.handoff.afterClaim(ctx, w, gen)
	}
	if err == nil && mode == "fair" {
		// Claimed in turns across tenants: returned in the order of the turns.
		s.fairQueues.Store(p.Queue, struct{}{})
		jobs, _, err = s.claimFair(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
		}
		return jobs, nil
	}
	if err == nil && mode == "on" && len(jobs) < p.Limit {
		var more []*store.Job
		more, err = s.claimLimited(ctx, p, p.Limit-len(jobs))
		jobs = append(jobs, more...)
	}
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	// UPDATE ... RETURNING gives no order; restore the claim order.
	slices.SortFunc(jobs, func(a, b *store.Job) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		if c := a.ScheduledAt.Compare(b.ScheduledAt); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return jobs, nil
}

// claimResults reads the results of the claim batch: the planner settings with the queue's claim
// mode ("on": it has claimable jobs with a rate key, "fair": with a tenant, "off": neither), then
// the claimed jobs.
func claimResults(br pgx.BatchResults) (jobs []*store.Job, mode string, err error) {
	if mode, err = claimMode(br); err != nil {
		return nil, "", err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, "", err
	}
	jobs, err = scanJobs(rows)
	return jobs, mode, err
}

// claimMode reads the claim mode, the last column of the planner settings' one row, straight from
// the wire: scanning the row would plan seven columns' scans for one value.
func claimMode(br pgx.BatchResults) (string, error) {
	rows, err := br.Query()
	if err != nil {
		return "", err
	}
	return readClaimMode(rows)
}

// readClaimMode reads the claim mode from the plan row of rows, and closes rows.
func readClaimMode(rows pgx.Rows) (string, error) {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", pgx.ErrNoRows
	}
	last := len(rows.FieldDescriptions()) - 1
	mode, ok := rawText(rows, last)
	if !ok {
		dst := make([]any, last+1)
		dst[last] = &mode
		if err := rows.Scan(dst...); err != nil {
			return "", err
		}
	}
	rows.Close()
	return mode, rows.Err()
}

// claimFair claims up to p.Limit jobs of p.Queue in turns across its tenants, in one round trip,
// when the queue's claim mode (returned) is still "fair"; otherwise it claims nothing.
func (s *Store) claimFair(ctx context.Context, p store.ClaimParams) ([]*store.Job, string, error) {
	var jobs []*store.Job
	var mode string
	b := &pgx.Batch{}
	tag := newClaimTag()
	b.Queue(s.q.claimFairPlan, p.Queue, tag).Query(func(rows pgx.Rows) error {
		var err error
		mode, err = readClaimMode(rows)
		return err
	})
	b.Queue(s.q.claimFair, p.Queue, p.Limit, p.LeaseDuration.Microseconds(), p.WorkerID, nilIfEmpty(p.Kinds)).
		Query(func(rows pgx.Rows) error {
			var err error
			jobs, err = scanJobs(rows)
			return err
		})
	if err := s.sendClaim(ctx, &p, tag, b, nil); err != nil {
		return nil, "", fmt.Errorf("fair claim: %w", err)
	}
	return jobs, mode, nil
}

// claimLimited claims up to limit jobs of p.Queue through claim_limited_held, in one round trip,
// and reports the jobs it held back to p.OnHeldBack once the claim committed.
func (s *Store) claimLimited(ctx context.Context, p store.ClaimParams, limit int) ([]*store.Job, error) {
	var jobs []*store.Job
	var limited pgtype.Text
	b := &pgx.Batch{}
	wantLimited := "off"
	if p.OnLimited != nil {
		wantLimited = "on"
	}
	tag := newClaimTag()
	b.Queue(s.q.claimLimitedPlan, wantLimited, tag)
	b.Queue(s.q.claimLimited, p.Queue, nilIfEmpty(p.Kinds), limit, p.LeaseDuration.Microseconds(), p.WorkerID).
		Query(func(rows pgx.Rows) error {
			var err error
			jobs, err = scanJobs(rows)
			return err
		})
	if p.OnLimited != nil {
		// The keys the claim found without room (migration 025), in the batch's transaction.
		b.Queue(sqlClaimLimitedHits).QueryRow(func(row pgx.Row) error { return row.Scan(&limited) })
	}
	if err := s.sendClaim(ctx, &p, tag, b, nil); err != nil {
		return nil, fmt.Errorf("limited claim: %w", err)
	}
	if limited.Valid && limited.String != "" {
		hits, err := parseLimitHits(limited.String)
		if err != nil {
			return nil, fmt.Errorf("limited claim: the keys without room: %w", err)
		}
		defer p.ReportLimited(hits) // after OnHeldBack, as the other stores call them
	}
	// The claimed jobs are active; the others were held back (claim_limited_held).
	var dropped, rescheduled []*store.Job
	claimed := jobs[:0]
	for _, j := range jobs {
		switch j.State {
		case store.StateActive:
			claimed = append(claimed, j)
		case store.StateDiscarded:
			dropped = append(dropped, j)
		default:
			rescheduled = append(rescheduled, j)
		}
	}
	p.ReportHeldBack(dropped, rescheduled)
	return claimed, nil
}

// sqlClaimLimitedHits reads what claim_limited_untokened (migrations 024, 025: only when
// sqlClaimLimitedPlan asked for it) left in the transaction:
// the keys whose limit had no room for a job it would have taken, as JSON, or ""/NULL for none.
const sqlClaimLimitedHits = `SELECT current_setting('pronto.rate_limited', true)`

// parseLimitHits reads the JSON of sqlClaimLimitedHits: [[key, max_active, rate, period_us,
// window_count, active, spent], ...].
func parseLimitHits(v string) ([]store.LimitHit, error) {
	var rows [][]json.RawMessage
	if err := json.Unmarshal([]byte(v), &rows); err != nil {
		return nil, err
	}
	hits := make([]store.LimitHit, 0, len(rows))
	for _, r := range rows {
		if len(r) < 7 {
			return nil, fmt.Errorf("entry %s: want 7 values", r)
		}
		var spent bool
		if err := json.Unmarshal(r[6], &spent); err != nil {
			return nil, err
		}
		var key string
		var maxActive, rate, periodUS, windowCount, active int64
		for i, dst := range []any{&key, &maxActive, &rate, &periodUS, &windowCount, &active} {
			if err := json.Unmarshal(r[i], dst); err != nil {
				return nil, err
			}
		}
		if !spent {
			hits = append(hits, store.LimitHit{Key: key, HasRoom: true})
			continue
		}
		l := store.RateLimit{MaxActive: int(maxActive), Rate: int(rate), Period: time.Duration(periodUS) * time.Microsecond}
		hits = append(hits, store.NewLimitHit(key, l, active, windowCount))
	}
	return hits, nil
}

// finishOrder parses the completions' ids and returns them with the indexes of the valid ones in
// id order: Finish locks rows in id order, as Heartbeat's index scan does, so overlapping batches
// cannot deadlock. An id that is no UUID is left out of order (no job can have it).
func finishOrder(cs []store.Completion) (ids []pgtype.UUID, order []int) {
	order = make([]int, 0, len(cs))
	ids = make([]pgtype.UUID, len(cs))
	for i, c := range cs {
		if u, ok := parseUUID(c.ID); ok {
			ids[i] = u
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(ids[a].Bytes[:], ids[b].Bytes[:]) })
	return ids, order
}

// Finish applies the completions in one statement: every job still active in the same attempt
// takes its next state, and the queues of jobs made claimable or scheduled are announced in the same
// statement, sent in one round trip with the setting that pins its plan (sqlFinishPlan).
// Completions for ids that are not UUIDs are reported as not applied.
func (s *Store) Finish(ctx context.Context, completions []store.Completion) ([]store.FinishResult, error) {
	results := make([]store.FinishResult, len(completions))
	if len(completions) == 0 {
		return results, nil
	}
	for i, c := range completions {
		results[i].ID = c.ID
	}
	ids, order := finishOrder(completions)
	n := len(order)
	if n == 0 {
		return results, nil
	}
	args, err := finishArgs(completions, ids, order)
	if err != nil {
		return nil, err
	}
	finish, relative := s.finishStatement()
	if relative {
		args = append(args, s.finishShift(ctx, s.pool, completions...))
	}
	b := &pgx.Batch{}
	b.Queue(s.q.finishPlan)
	b.Queue(finish, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			ord, err := rawInt8(rows)
			if err != nil {
				return err
			}
			// ord is the applied completion's position among those sent, which are in order.
			if ord < 1 || ord > int64(len(order)) {
				return fmt.Errorf("finish: the database answered position %d of %d", ord, len(order))
			}
			results[order[ord-1]].Applied = true
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("finish %d jobs: %w", n, err)
	}
	return results, nil
}

// rawInt8 reads the current row's first column, a bigint, from the wire when it comes in binary
// format, else through Scan.
func rawInt8(rows pgx.Rows) (int64, error) {
	if f := rows.FieldDescriptions(); len(f) > 0 && f[0].Format == pgtype.BinaryFormatCode &&
		f[0].DataTypeOID == pgtype.Int8OID {
		if v := rows.RawValues(); len(v) > 0 && len(v[0]) == 8 {
			return int64(binary.BigEndian.Uint64(v[0])), nil
		}
	}
	var n int64
	err := rows.Scan(&n)
	return n, err
}

// rawUUID reads the current row's first column, a uuid, from the wire when it comes in binary
// format, else through Scan.
func rawUUID(rows pgx.Rows) ([16]byte, error) {
	if f := rows.FieldDescriptions(); len(f) > 0 && f[0].Format == pgtype.BinaryFormatCode &&
		f[0].DataTypeOID == pgtype.UUIDOID {
		if v := rows.RawValues(); len(v) > 0 && len(v[0]) == 16 {
			return [16]byte(v[0]), nil
		}
	}
	var id pgtype.UUID
	if err := rows.Scan(&id); err != nil {
		return id.Bytes, err
	}
	return id.Bytes, nil
}

// finishArgs is the parameters of sqlFinish (but the caller's time, see finishStatement) for the completions at the positions order (sorted by
// their ids, parsed into ids).
func finishArgs(completions []store.Completion, ids []pgtype.UUID, order []int) ([]any, error) {
	n := len(order)
	var (
		uuids     = make([]pgtype.UUID, n)
		attempts  = make([]int32, n)
		states    = make([]string, n)
		scheduled = make([]pgtype.Timestamptz, n)
		errs      = make([][]byte, n)
		res       = make([][]byte, n)
		refunds   = make([]bool, n)
		tokens    = make([]pgtype.UUID, n)
		removes   = make([]bool, n)
	)
	for k, i := range order {
		c := &completions[i]
		switch c.State {
		case store.StateCompleted, store.StateRetryable, store.StateScheduled, store.StateDiscarded,
			store.StateCancelled, store.StateAvailable:
		default:
			return nil, fmt.Errorf("finish jobs: job %s: cannot finish into state %q", c.ID, c.State)
		}
		uuids[k] = ids[i]
		attempts[k] = int32(c.Attempt)
		states[k] = string(c.State)
		scheduled[k] = nullTime(c.ScheduledAt)
		if c.Error != nil {
			b, err := json.Marshal(c.Error)
			if err != nil {
				return nil, fmt.Errorf("finish jobs: job %s: encode error: %w", c.ID, err)
			}
			errs[k] = b
		}
		res[k] = nullJSON(c.Result)
		refunds[k] = c.RefundAttempt
		removes[k] = c.Remove
		if c.Token != "" {
			// A token that is no UUID is no claim's: the completion cannot apply. An all-zero
			// token, which no claim draws, makes it so.
			if u, ok := parseUUID(c.Token); ok {
				tokens[k] = u
			} else {
				tokens[k] = pgtype.UUID{Valid: true}
			}
		}
	}
	// FlatArray spares pgx the reflection it uses on slices of other element types.
	return []any{pgtype.FlatArray[pgtype.UUID](uuids), attempts, states,
		pgtype.FlatArray[pgtype.Timestamptz](scheduled), pgtype.FlatArray[[]byte](errs),
		pgtype.FlatArray[[]byte](res), refunds, pgtype.FlatArray[pgtype.UUID](tokens), removes}, nil
}

// Heartbeat extends the leases of the listed jobs that p.WorkerID still holds, in one statement, and
// returns the ids it could not extend.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) ([]string, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	if len(p.Tokens) > 0 && len(p.Tokens) != len(p.IDs) {
		return nil, fmt.Errorf("heartbeat: %d claim tokens for %d jobs", len(p.Tokens), len(p.IDs))
	}
	type pair struct{ id, token pgtype.UUID }
	pairs := make([]pair, 0, len(p.IDs))
	for i, id := range p.IDs {
		u, ok := parseUUID(id)
		if !ok {
			continue // no such job: reported lost below
		}
		var tok pgtype.UUID
		if len(p.Tokens) > 0 {
			if tok, ok = parseUUID(p.Tokens[i]); !ok {
				continue // no claim's token: lost
			}
		}
		pairs = append(pairs, pair{u, tok})
	}
	slices.SortFunc(pairs, func(a, b pair) int { return bytes.Compare(a.id.Bytes[:], b.id.Bytes[:]) })
	ids := make([]pgtype.UUID, len(pairs))
	tokens := make([]pgtype.UUID, len(pairs))
	for i, pr := range pairs {
		ids[i], tokens[i] = pr.id, pr.token
	}
	held := make(map[[16]byte]struct{}, len(ids))
	if len(ids) > 0 {
		rows, err := s.pool.Query(ctx, s.q.heartbeat, ids, p.WorkerID, p.LeaseDuration.Microseconds(), tokens)
		if err != nil {
			return nil, fmt.Errorf("heartbeat %d jobs of worker %q: %w", len(ids), p.WorkerID, err)
		}
		for rows.Next() {
			id, err := rawUUID(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("heartbeat %d jobs of worker %q: %w", len(ids), p.WorkerID, err)
			}
			held[id] = struct{}{}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("heartbeat %d jobs of worker %q: %w", len(ids), p.WorkerID, err)
		}
	}
	var lost []string
	for _, id := range p.IDs {
		u, ok := parseUUID(id)
		if ok {
			if _, ok = held[u.Bytes]; ok {
				continue
			}
		}
		lost = append(lost, id)
	}
	return lost, nil
}

// Rescue takes back up to p.Limit active jobs whose lease expired: to available with a
// lease_expired error entry, or discarded when their attempts are spent. Their queues are announced.
func (s *Store) Rescue(ctx context.Context, p store.RescueParams) (store.RescueResult, error) {
	var out store.RescueResult
	var jobs []*store.Job
	b := &pgx.Batch{}
	b.Queue(sqlRescuePlan)
	b.Queue(s.q.rescue, limitOrDefault(p.Limit)).Query(func(rows pgx.Rows) error {
		var err error
		jobs, err = scanJobs(rows)
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return out, fmt.Errorf("rescue jobs: %w", err)
	}
	for _, j := range jobs {
		if j.State == store.StateDiscarded {
			out.Discarded = append(out.Discarded, j)
		} else {
			out.Requeued = append(out.Requeued, j)
		}
	}
	return out, nil
}

// Promote moves up to limit due scheduled and retryable jobs to available and announces their
// queues.
//
// It commits without waiting for its WAL flush (sqlAsyncCommit in the same implicit transaction):
// claims skip the rows it holds locked, so every millisecond it holds them is one in which a due
// job looks unclaimable (an HTTP fetch then comes back empty once its retries run out, see
// server.fetchMore). A promotion lost in a database crash loses nothing: claims take due scheduled
// and retryable jobs as they are, and the next pass promotes them again.
func (s *Store) Promote(ctx context.Context, limit int) (int, error) {
	b := &pgx.Batch{}
	b.Queue(sqlAsyncCommit)
	b.Queue(sqlRescuePlan)
	b.Queue(s.q.promote, limitOrDefault(limit))
	br := s.pool.SendBatch(ctx, b)
	var n int
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("promote due jobs: %w", err)
	}
	return n, nil
}

// DiscardExpired discards up to limit jobs not yet started (scheduled, available, pending or
// retryable) whose expires_at has passed, recording an "expired" error entry on each, and returns
// them.
func (s *Store) DiscardExpired(ctx context.Context, limit int) ([]*store.Job, error) {
	rows, err := s.pool.Query(ctx, s.q.discardExpired, limitOrDefault(limit))
	if err != nil {
		return nil, fmt.Errorf("discard expired jobs: %w", err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("discard expired jobs: %w", err)
	}
	return jobs, nil
}

// NextDue returns the earliest due time of queue's scheduled and retryable jobs.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	var t pgtype.Timestamptz
	if err := s.pool.QueryRow(ctx, s.q.nextDue, queue).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("next due job of queue %q: %w", queue, err)
	}
	return t.Time, t.Valid, nil
}

// Cleanup deletes up to p.Limit terminal jobs that finished before their state's cut-off; a zero
// cut-off keeps that state's jobs.
func (s *Store) Cleanup(ctx context.Context, p store.CleanupParams) (int, error) {
	if p.CompletedBefore.IsZero() && p.CancelledBefore.IsZero() && p.DiscardedBefore.IsZero() {
		return 0, nil
	}
	var queues []string // NULL: every queue
	if len(p.Queues) > 0 {
		queues = p.Queues
	}
	skip := p.SkipQueues
	if skip == nil {
		skip = []string{} // <> ALL of an empty array holds; of NULL it would not
	}
	var n int
	err := s.pool.QueryRow(ctx, s.q.cleanup, nullTime(p.CompletedBefore), nullTime(p.CancelledBefore),
		nullTime(p.DiscardedBefore), limitOrDefault(p.Limit), queues, skip).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("clean up finished jobs: %w", err)
	}
	return n, nil
}

func limitOrDefault(limit int) int {
	if limit <= 0 {
		return defaultMaintenanceLimit
	}
	return limit
}

// CompletePgxTx applies one completion inside the application's transaction tx (see
// store.PgxTxCompleter). It runs sqlFinish without sqlFinishPlan, whose planner settings would
// last to the end of the application's transaction.
func (s *Store) CompletePgxTx(ctx context.Context, tx pgx.Tx, c store.Completion) (bool, error) {
	if tx == nil {
		return false, fmt.Errorf("complete job %s: nil transaction", c.ID)
	}
	u, ok := parseUUID(c.ID)
	if !ok {
		return false, nil
	}
	args, err := finishArgs([]store.Completion{c}, []pgtype.UUID{u}, []int{0})
	if err != nil {
		return false, err
	}
	finish, relative := s.finishStatement()
	if relative {
		args = append(args, s.finishShift(ctx, tx, c))
	}
	rows, err := tx.Query(ctx, finish, args...)
	if err != nil {
		return false, fmt.Errorf("complete job %s: %w", c.ID, err)
	}
	applied := false
	for rows.Next() {
		applied = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("complete job %s: %w", c.ID, err)
	}
	return applied, nil
}
