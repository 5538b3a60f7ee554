package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// defaultMaintenanceLimit bounds Rescue, Promote, DiscardExpired and Cleanup when the caller gives no
// positive limit.
const defaultMaintenanceLimit = 1000

// maxClaimKinds is the largest kinds filter given its own prepared statement; Claim with more kinds
// fails (pronto clients register far fewer).
const maxClaimKinds = 500

// Claim moves up to p.Limit claimable jobs of p.Queue to active in one write transaction (one UPDATE
// ... RETURNING statement) and returns them in claim order: priority descending, then due time, then
// id. SQLite admits one writer at a time, across processes too, so no job is claimed twice.
//
// That statement claims nothing while the queue holds a claimable job with a rate key. When it claims
// nothing, a read asks whether that is why, and if so claimLimited claims in a write transaction that
// enforces the keys' limits. Queues without such jobs are claimed by the one statement, as they
// always were.
//
// A claim for several workers (p.WorkerIDs) records the first entry on every job, then the others
// in a second statement (reassignWorkers).
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	return store.ClaimThenReassign(ctx, s, p, s.claim, s.reassignWorkers)
}

// reassignWorkers records the worker ids of claimed jobs, each still active under its claim token,
// in one statement.
func (s *Store) reassignWorkers(ctx context.Context, jobs []*store.Job) error {
	rows := make([][3]string, len(jobs))
	for i, j := range jobs {
		rows[i] = [3]string{j.ID, j.WorkerID, j.ClaimToken}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	st, err := s.stmt(ctx, reassignWorkersSQL)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, string(b))
	return err
}

func (s *Store) claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	if len(p.Kinds) > maxClaimKinds {
		return nil, fmt.Errorf("claim jobs from queue %q: %d kinds is more than %d", p.Queue, len(p.Kinds), maxClaimKinds)
	}
	st, err := s.stmt(ctx, claimQuery(len(p.Kinds)))
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	nowUS, _ := s.nowMicro()
	leaseUS := nowUS + p.LeaseDuration.Microseconds()
	args := make([]any, 5, 5+len(p.Kinds))
	args[0] = nowUS
	args[1] = leaseUS
	args[2] = p.WorkerID
	args[3] = p.Queue
	args[4] = int64(p.Limit)
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	// One statement is its own transaction: no BEGIN/COMMIT round trips needed.
	jobs, err := retryLapsed(ctx, s.w, nowUS, func() ([]*store.Job, error) {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		return scanClaimed(rows, p.Limit, nowUS, leaseUS, p.WorkerID)
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	if len(jobs) == 0 {
		var keyed, tenants bool
		if err := s.readRow(ctx, queueModeSQL, p.Queue).Scan(&keyed, &tenants); err != nil {
			return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
		}
		switch {
		case keyed:
			if jobs, err = s.claimLimited(ctx, p); err != nil {
				return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
			}
		case tenants:
			// In the order of the turns, not sorted.
			if jobs, err = s.claimFair(ctx, p); err != nil {
				return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
			}
			return jobs, nil
		}
	}
	sortClaimOrder(jobs)
	return jobs, nil
}

// sortClaimOrder sorts jobs as a claim takes them: priority descending, then due time, then id.
func sortClaimOrder(jobs []*store.Job) {
	slices.SortFunc(jobs, func(a, b *store.Job) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := a.ScheduledAt.Compare(b.ScheduledAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// finishChunk is the most completions one finishBatchSQL statement applies. Smaller batches use the
// statement of the next size finishSize allows, padded with NULL rows, so at most twelve of each form
// are ever prepared.
const finishChunk = 128

// finishSize returns the number of rows of the finishBatchSQL statement that carries n completions
// (1 <= n <= finishChunk): the least power of two up to 16, then the least multiple of 16. A batch
// then carries at most 15 padding rows (a power of two up to 128 could carry 63, each costing its
// binds and a lookup).
func finishSize(n int) int {
	if n <= 16 {
		return pow2(n)
	}
	return (n + 15) / 16 * 16
}

// finishQueries holds finishBatchSQL's text for every size finishSize returns, indexed by size and
// plainOnly, built once: Finish looks its prepared statement up by that text on every call.
var finishQueries = func() (qs [2][finishChunk + 1]string) {
	for n := 1; n <= finishChunk; n++ {
		if size := finishSize(n); size == n {
			qs[0][n], qs[1][n] = finishBatchSQL(n, false), finishBatchSQL(n, true)
		}
	}
	return qs
}()

// finishQuery returns finishBatchSQL(finishSize(n), plainOnly), built once.
func finishQuery(n int, plainOnly bool) string {
	i := 0
	if plainOnly {
		i = 1
	}
	return finishQueries[i][finishSize(n)]
}

// finishRow is one completion's values for finishBatchSQL.
type finishRow struct {
	idx      int // index in the completions
	args     [finishBatchArgs]any
	announce bool
	due      int64 // for announced jobs: due time, 0 for now
}

// finished is what finishBatchSQL returns of one job it changed.
type finished struct {
	id, queue  string
	rateKey    bool
	workflowID sql.NullString
	state      store.State
}

// Finish applies the completions, each guarded by state = 'active' and the completion's attempt, and
// then announces the queues where jobs became claimable or due, and those of limited jobs that left
// active (a slot is free). A batch naming one job twice applies the first and then the second (which
// finds the job no longer active unless the first left it so).
//
// A batch of up to 128 distinct jobs is first tried as one statement, its own transaction, that
// leaves workflow jobs alone. The completions it did not apply (workflow jobs, and stale ones) and
// larger or repetitive batches take one write transaction, in which every workflow job reaching a
// terminal state decides its pending children.
func (s *Store) Finish(ctx context.Context, completions []store.Completion) ([]store.FinishResult, error) {
	if len(completions) == 0 {
		return nil, nil
	}
	nowUS, now := s.nowMicro()
	results := make([]store.FinishResult, len(completions))
	rows := make([]finishRow, len(completions))
	for i := range completions {
		results[i].ID = completions[i].ID
		if err := makeFinishRow(&rows[i], i, &completions[i], nowUS, now); err != nil {
			return nil, err
		}
	}

	var out outbox
	if hasRemovals(completions) {
		var err error
		if rows, err = s.removeFinished(ctx, completions, rows, results, &out); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		if len(rows) == 0 {
			s.publishOutbox(&out)
			return results, nil
		}
	}
	if len(rows) <= finishChunk && !hasDuplicateIDs(completions) {
		st, err := s.stmt(ctx, finishQuery(len(rows), true))
		if err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		done, err := retryLapsed(ctx, s.w, nowUS, func() (map[string]finished, error) {
			return runFinishChunk(ctx, st, rows, nowUS)
		})
		if err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		rows = noteFinished(rows, done, results, &out)
		if len(rows) == 0 {
			s.publishOutbox(&out)
			return results, nil
		}
	}
	if err := s.finishInTx(ctx, completions, rows, results, nowUS, &out); err != nil {
		return nil, err
	}
	s.publishOutbox(&out)
	return results, nil
}

// hasRemovals reports whether a completion asks to remove its completed job (store.Completion.Remove).
func hasRemovals(cs []store.Completion) bool {
	for i := range cs {
		if cs[i].Remove && cs[i].State == store.StateCompleted {
			return true
		}
	}
	return false
}

// removeFinished deletes, in one statement, the jobs whose completions ask to remove them and that
// removeFinishedSQL finds removable, marks those completions applied, wakes the queues of the
// rate-limited ones among them (a slot of the key is free), and returns the rows left to apply. A
// job named by several completions is removed by the first of them; the others then find no job.
func (s *Store) removeFinished(ctx context.Context, cs []store.Completion, rows []finishRow, results []store.FinishResult, out *outbox) ([]finishRow, error) {
	return removeFinishedBy(ctx, func(arg string) (*sql.Rows, error) {
		st, err := s.stmt(ctx, removeFinishedSQL)
		if err != nil {
			return nil, err
		}
		return st.QueryContext(ctx, arg)
	}, cs, rows, results, out)
}

// removeFinishedBy is removeFinished with removeFinishedSQL run by query (given its argument): on
// the writer, or in a transaction (CompleteSQLTx).
func removeFinishedBy(ctx context.Context, query func(arg string) (*sql.Rows, error), cs []store.Completion, rows []finishRow, results []store.FinishResult, out *outbox) ([]finishRow, error) {
	type target struct {
		ID      string  `json:"i"`
		Attempt int     `json:"a"`
		Token   *string `json:"t"`
	}
	var targets []target
	first := map[string]int{} // id -> index of its first removing completion
	for i := range cs {
		c := &cs[i]
		if !c.Remove || c.State != store.StateCompleted {
			continue
		}
		if _, dup := first[c.ID]; dup {
			continue
		}
		first[c.ID] = i
		t := target{ID: c.ID, Attempt: c.Attempt}
		if c.Token != "" {
			t.Token = &c.Token
		}
		targets = append(targets, t)
	}
	arg, err := json.Marshal(targets)
	if err != nil {
		return nil, err
	}
	res, err := query(string(arg))
	if err != nil {
		return nil, err
	}
	removed := map[int]bool{}
	for res.Next() {
		var id, queue string
		var rateKey sql.NullString
		if err := res.Scan(&id, &queue, &rateKey); err != nil {
			res.Close()
			return nil, err
		}
		i := first[id]
		removed[i] = true
		results[i].Applied = true
		if rateKey.Valid { // it left active: its key may have room for a waiting job now
			out.wake(queue, time.Time{})
		}
	}
	if err := closeRows(res); err != nil {
		return nil, err
	}
	if len(removed) == 0 {
		return rows, nil
	}
	left := rows[:0:0]
	for _, r := range rows {
		if !removed[r.idx] {
			left = append(left, r)
		}
	}
	return left, nil
}

// makeFinishRow computes the values of completion c (index i) for finishBatchSQL.
func makeFinishRow(r *finishRow, i int, c *store.Completion, nowUS int64, now time.Time) error {
	r.idx = i
	var sched, completed, result, errEntry any
	refund := int64(0)
	if c.RefundAttempt {
		refund = 1
	}
	switch c.State {
	case store.StateCompleted:
		completed = nowUS
		result = nullJSON(c.Result)
	case store.StateDiscarded, store.StateCancelled:
		completed = nowUS
	case store.StateRetryable, store.StateScheduled:
		us := nowUS
		if !c.ScheduledAt.IsZero() {
			us = c.ScheduledAt.UnixMicro()
		}
		sched = us
		r.announce = true
		if us > nowUS {
			r.due = us
		}
	case store.StateAvailable:
		sched = nowUS
		r.announce = true
	default:
		return fmt.Errorf("finish job %s: state %q is not a completion state", c.ID, c.State)
	}
	if c.Error != nil {
		e := *c.Error
		if e.At.IsZero() {
			e.At = now
		}
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("finish job %s: encode error: %w", c.ID, err)
		}
		errEntry = string(b)
	}
	var token any
	if c.Token != "" {
		token = c.Token
	}
	r.args = [finishBatchArgs]any{c.ID, int64(c.Attempt), string(c.State), sched, completed, result, errEntry, refund, token}
	return nil
}

// pow2 returns the least power of two that is at least n.
func pow2(n int) int {
	size := 1
	for size < n {
		size *= 2
	}
	return size
}

// runFinishChunk runs st, a finishBatchSQL statement for finishSize(len(chunk)) rows, on chunk at
// nowUS and returns the jobs it changed by id.
func runFinishChunk(ctx context.Context, st *sql.Stmt, chunk []finishRow, nowUS int64) (map[string]finished, error) {
	res, err := st.QueryContext(ctx, finishChunkArgs(chunk, nowUS)...)
	if err != nil {
		return nil, err
	}
	return readFinished(res, len(chunk))
}

// finishChunkArgs is the parameters of finishBatchSQL for chunk, padded to finishSize(len(chunk)) rows,
// then the statement's time nowUS.
func finishChunkArgs(chunk []finishRow, nowUS int64) []any {
	args := make([]any, 0, finishSize(len(chunk))*finishBatchArgs+1)
	for i := range chunk {
		args = append(args, chunk[i].args[:]...)
	}
	for range (finishSize(len(chunk)) - len(chunk)) * finishBatchArgs {
		args = append(args, nil)
	}
	return append(args, nowUS)
}

// readFinished reads the rows of a finishBatchSQL statement and closes them.
func readFinished(res *sql.Rows, n int) (map[string]finished, error) {
	done := make(map[string]finished, n)
	for res.Next() {
		var f finished
		var rateKey sql.NullString
		var state string
		if err := res.Scan(&f.id, &f.queue, &rateKey, &f.workflowID, &state); err != nil {
			res.Close()
			return nil, err
		}
		f.rateKey, f.state = rateKey.Valid, store.State(state)
		done[f.id] = f
	}
	if err := closeRows(res); err != nil {
		return nil, err
	}
	return done, nil
}

// noteFinished marks the rows applied in done, adds their announcements to out, and returns the rows
// not applied.
func noteFinished(rows []finishRow, done map[string]finished, results []store.FinishResult, out *outbox) []finishRow {
	var left []finishRow
	for _, r := range rows {
		f, ok := done[results[r.idx].ID]
		if !ok {
			left = append(left, r)
			continue
		}
		results[r.idx].Applied = true
		if r.announce {
			var due time.Time
			if r.due != 0 {
				due = microTime(r.due)
			}
			out.wake(f.queue, due)
		}
		if f.rateKey { // it left active: its key may have room for a waiting job now
			out.wake(f.queue, time.Time{})
		}
	}
	return left
}

// finishInTx applies rows (completions not applied yet, in order) in one write transaction, workflow
// jobs included: those reaching a terminal state decide their children before it commits.
func (s *Store) finishInTx(ctx context.Context, completions []store.Completion, rows []finishRow, results []store.FinishResult, nowUS int64, out *outbox) error {
	// Split into rounds in which every id appears once: a statement cannot apply two completions to one
	// row. Nearly always there is one round.
	rounds := [][]finishRow{rows}
	if hasDuplicateIDs(completions) {
		rounds = splitDuplicateRounds(rows, completions)
	}
	queries := slices.Clone(settleQueries)
	for _, round := range rounds {
		for chunk := range slices.Chunk(round, finishChunk) {
			queries = append(queries, finishQuery(len(chunk), false))
		}
	}
	r, err := s.begin(ctx, queries...)
	if err != nil {
		return fmt.Errorf("finish jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var terminal []string
	for _, round := range rounds {
		for chunk := range slices.Chunk(round, finishChunk) {
			st := r.tx.StmtContext(ctx, r.prepared(finishQuery(len(chunk), false)))
			done, err := retryLapsed(ctx, r, nowUS, func() (map[string]finished, error) {
				return runFinishChunk(ctx, st, chunk, nowUS)
			})
			if err != nil {
				return fmt.Errorf("finish jobs: %w", err)
			}
			noteFinished(chunk, done, results, out)
			for _, f := range done {
				if f.workflowID.Valid && f.state.Terminal() {
					terminal = append(terminal, f.id)
				}
			}
		}
	}
	if len(terminal) > 0 {
		slices.Sort(terminal) // a deterministic order of work
		if err := settleChildren(ctx, r, terminal, nowUS, out); err != nil {
			return fmt.Errorf("finish jobs: %w", err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return fmt.Errorf("finish jobs: commit: %w", err)
	}
	return nil
}

// hasDuplicateIDs reports whether two completions name the same job.
func hasDuplicateIDs(cs []store.Completion) bool {
	if len(cs) < 2 {
		return false
	}
	seen := make(map[string]struct{}, len(cs))
	for i := range cs {
		if _, ok := seen[cs[i].ID]; ok {
			return true
		}
		seen[cs[i].ID] = struct{}{}
	}
	return false
}

// splitDuplicateRounds puts the n-th completion of each job in round n, keeping order within rounds.
func splitDuplicateRounds(rows []finishRow, cs []store.Completion) [][]finishRow {
	var rounds [][]finishRow
	count := map[string]int{}
	for _, r := range rows {
		n := count[cs[r.idx].ID]
		count[cs[r.idx].ID] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], r)
	}
	return rounds
}

// heartbeatChunk is the most ids one heartbeat statement names. Smaller lists use the statement for
// the next power of two, padded with NULLs.
const heartbeatChunk = 128

// Heartbeat extends the leases of the listed jobs that are still active and held by p.WorkerID, and
// returns the others. Up to 128 ids take one statement (its own transaction); more take one write
// transaction.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) ([]string, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	chunks := slices.Collect(slices.Chunk(p.IDs, heartbeatChunk))
	stmts := make([]*sql.Stmt, len(chunks))
	sizes := make([]int, len(chunks))
	for i, c := range chunks {
		size := 1
		for size < len(c) {
			size *= 2
		}
		st, err := s.stmt(ctx, heartbeatSQL(size))
		if err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
		stmts[i], sizes[i] = st, size
	}
	nowUS, _ := s.nowMicro()
	expiry := nowUS + p.LeaseDuration.Microseconds()
	var tx *sql.Tx
	if len(chunks) > 1 {
		var err error
		if tx, err = s.w.BeginTx(ctx, nil); err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	}
	extended := make(map[string]struct{}, len(p.IDs))
	if len(p.Tokens) > 0 && len(p.Tokens) != len(p.IDs) {
		return nil, fmt.Errorf("heartbeat: %d claim tokens for %d jobs", len(p.Tokens), len(p.IDs))
	}
	args := make([]any, 0, 2+2*heartbeatChunk)
	for i, c := range chunks {
		args = append(args[:0], expiry, p.WorkerID)
		for k, id := range c {
			var token any
			if len(p.Tokens) > 0 {
				token = p.Tokens[i*heartbeatChunk+k]
			}
			args = append(args, id, token)
		}
		for range sizes[i] - len(c) {
			args = append(args, nil, nil)
		}
		st := stmts[i]
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("heartbeat: %w", err)
			}
			extended[id] = struct{}{}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("heartbeat: %w", err)
		}
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("heartbeat: commit: %w", err)
		}
	}
	var lost []string
	for _, id := range p.IDs {
		if _, ok := extended[id]; !ok {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// Rescue takes back, in one statement, up to p.Limit active jobs whose lease ran out: each gets an
// error entry of type "lease_expired" and goes to available, or to discarded when its attempts are
// spent. Discarded workflow jobs decide their children in the same transaction. The queues it made
// claimable, and those of limited jobs (whose slots it freed), are announced.
func (s *Store) Rescue(ctx context.Context, p store.RescueParams) (store.RescueResult, error) {
	var res store.RescueResult
	limit := p.Limit
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	r, err := s.begin(ctx, append([]string{rescueSQL}, settleQueries...)...)
	if err != nil {
		return res, fmt.Errorf("rescue jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	nowUS, now := s.nowMicro()
	jobs, err := retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
		rows, err := r.QueryContext(ctx, rescueSQL, nowUS, now.Format(time.RFC3339Nano), int64(limit))
		if err != nil {
			return nil, err
		}
		return scanJobs(rows, 0)
	})
	if err != nil {
		return res, fmt.Errorf("rescue jobs: %w", err)
	}
	slices.SortFunc(jobs, func(a, b *store.Job) int { return cmp.Compare(a.ID, b.ID) })
	var out outbox
	for _, j := range jobs {
		if j.State == store.StateDiscarded {
			res.Discarded = append(res.Discarded, j)
			continue
		}
		res.Requeued = append(res.Requeued, j)
		out.wake(j.Queue, time.Time{})
	}
	if err := afterTerminal(ctx, r, res.Discarded, nowUS, &out); err != nil {
		return store.RescueResult{}, fmt.Errorf("rescue jobs: %w", err)
	}
	if err := r.tx.Commit(); err != nil {
		return store.RescueResult{}, fmt.Errorf("rescue jobs: commit: %w", err)
	}
	s.publishOutbox(&out)
	return res, nil
}

// Promote moves up to limit due scheduled and retryable jobs to available, in one statement, and
// announces their queues.
func (s *Store) Promote(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	st, err := s.stmt(ctx, promoteSQL)
	if err != nil {
		return 0, fmt.Errorf("promote jobs: %w", err)
	}
	nowUS, _ := s.nowMicro()
	queues, err := retryLapsed(ctx, s.w, nowUS, func() ([]string, error) {
		rows, err := st.QueryContext(ctx, nowUS, int64(limit))
		if err != nil {
			return nil, err
		}
		var queues []string // one per job promoted
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				rows.Close()
				return nil, err
			}
			queues = append(queues, q)
		}
		return queues, closeRows(rows)
	})
	if err != nil {
		return 0, fmt.Errorf("promote jobs: %w", err)
	}
	seen := map[string]bool{}
	var ns []store.Notification
	for _, q := range queues {
		if !seen[q] {
			seen[q] = true
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q})
		}
	}
	s.publish(ns)
	return len(queues), nil
}

// DiscardExpired discards up to limit jobs not yet started (available, scheduled, retryable or
// pending) whose expiry has passed, each with an error entry of type "expired", and returns them.
// Discarded workflow jobs decide their children in the same transaction.
func (s *Store) DiscardExpired(ctx context.Context, limit int) ([]*store.Job, error) {
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	r, err := s.begin(ctx, append([]string{discardExpiredSQL}, settleQueries...)...)
	if err != nil {
		return nil, fmt.Errorf("discard expired jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	nowUS, now := s.nowMicro()
	jobs, err := retryLapsed(ctx, r, nowUS, func() ([]*store.Job, error) {
		rows, err := r.QueryContext(ctx, discardExpiredSQL, nowUS, now.Format(time.RFC3339Nano), int64(limit))
		if err != nil {
			return nil, err
		}
		return scanJobs(rows, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("discard expired jobs: %w", err)
	}
	var inWorkflows []string
	for _, j := range jobs {
		if j.WorkflowID != "" {
			inWorkflows = append(inWorkflows, j.ID)
		}
	}
	var out outbox
	if len(inWorkflows) > 0 {
		if err := settleChildren(ctx, r, inWorkflows, nowUS, &out); err != nil {
			return nil, fmt.Errorf("discard expired jobs: %w", err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("discard expired jobs: commit: %w", err)
	}
	s.publishOutbox(&out)
	return jobs, nil
}

// NextDue returns the earliest due time of the scheduled and retryable jobs of queue, or the end of
// the window of a full rate limit with jobs waiting in queue, whichever comes first.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	nowUS, _ := s.nowMicro()
	var v sql.NullInt64
	if err := s.readRow(ctx, nextDueSQL, queue, nowUS).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("next due time of queue %q: %w", queue, s.schemaHint(err))
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return microTime(v.Int64), true, nil
}

// cleanupClockSlack is how far created_at may run behind insertion order (clocks of several processes
// on one file): Cleanup stops its walk at the first job created this long after the latest cut-off.
const cleanupClockSlack = time.Minute

// cleanupPage is how many rows one read of Cleanup's walk returns.
const cleanupPage = 1000

// Cleanup deletes at most p.Limit terminal jobs whose CompletedAt is before the cut-off of their state
// (a zero cut-off keeps that state forever), and returns how many it deleted.
//
// There is no index on completion time (it would cost every completion an index insert). Instead
// Cleanup walks the table in insertion order on a read connection, which blocks no writer, and stops
// at the first job created after the latest cut-off (plus a minute of clock slack), since a job
// completes after it is created: the walk covers the jobs old enough to qualify and no more. The
// candidates are then deleted in one short write transaction that checks their state and age again.
//
// A workflow job that a pending child still waits for is kept, however old: the child needs its
// outcome to be decided and its result for ParentResults. A workflow whose last jobs it deletes is
// deleted with them, in the same transaction.
func (s *Store) Cleanup(ctx context.Context, p store.CleanupParams) (int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	cut := [3]time.Time{p.CompletedBefore, p.CancelledBefore, p.DiscardedBefore}
	var latest time.Time
	for _, c := range cut {
		if c.After(latest) {
			latest = c
		}
	}
	if latest.IsZero() {
		return 0, nil
	}
	cutUS := [3]any{micro(cut[0]), micro(cut[1]), micro(cut[2])}
	qualifies := func(state string, completedAt int64) bool {
		var c time.Time
		switch store.State(state) {
		case store.StateCompleted:
			c = cut[0]
		case store.StateCancelled:
			c = cut[1]
		case store.StateDiscarded:
			c = cut[2]
		default:
			return false
		}
		return !c.IsZero() && completedAt < c.UnixMicro()
	}
	stopAt := latest.Add(cleanupClockSlack).UnixMicro()

	var candidates []int64
	var cursor int64
walk:
	for len(candidates) < limit {
		rows, err := s.r.QueryContext(ctx, cleanupScanSQL, cursor, cleanupPage)
		if err != nil {
			return 0, fmt.Errorf("clean up jobs: %w", s.schemaHint(err))
		}
		n := 0
		for rows.Next() {
			var rowid, createdAt int64
			var state, queue string
			var completedAt sql.NullInt64
			var kept bool
			if err := rows.Scan(&rowid, &state, &completedAt, &createdAt, &queue, &kept); err != nil {
				rows.Close()
				return 0, fmt.Errorf("clean up jobs: %w", err)
			}
			n++
			cursor = rowid
			if createdAt >= stopAt {
				rows.Close()
				break walk
			}
			if completedAt.Valid && !kept && qualifies(state, completedAt.Int64) && p.Cleans(queue) {
				candidates = append(candidates, rowid)
				if len(candidates) >= limit {
					break
				}
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return 0, fmt.Errorf("clean up jobs: %w", err)
		}
		rows.Close()
		if n < cleanupPage {
			break
		}
	}
	if len(candidates) == 0 {
		return 0, nil
	}
	ids, err := json.Marshal(candidates)
	if err != nil {
		return 0, err
	}
	r, err := s.begin(ctx, cleanupDeleteSQL, cleanupWorkflowsSQL)
	if err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	rows, err := r.QueryContext(ctx, cleanupDeleteSQL, string(ids), cutUS[0], cutUS[1], cutUS[2])
	if err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	n := 0
	var inWorkflows []string
	for rows.Next() {
		var workflowID sql.NullString
		if err := rows.Scan(&workflowID); err != nil {
			rows.Close()
			return 0, fmt.Errorf("clean up jobs: %w", err)
		}
		n++
		if workflowID.Valid && !slices.Contains(inWorkflows, workflowID.String) {
			inWorkflows = append(inWorkflows, workflowID.String)
		}
	}
	if err := closeRows(rows); err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	if len(inWorkflows) > 0 {
		b, err := json.Marshal(inWorkflows)
		if err != nil {
			return 0, err
		}
		if _, err := r.ExecContext(ctx, cleanupWorkflowsSQL, string(b)); err != nil {
			return 0, fmt.Errorf("clean up workflows: %w", err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return 0, fmt.Errorf("clean up jobs: commit: %w", err)
	}
	return n, nil
}

// CompleteSQLTx applies one completion inside the application's transaction tx, on this store's
// file (see store.SQLTxCompleter): a workflow job reaching a terminal state decides its children in
// it too, and the queues it wakes are announced when it commits.
func (s *Store) CompleteSQLTx(ctx context.Context, tx *sql.Tx, c store.Completion) (bool, error) {
	if tx == nil {
		return false, fmt.Errorf("complete job %s: nil transaction", c.ID)
	}
	nowUS, now := s.nowMicro()
	rows := make([]finishRow, 1)
	if err := makeFinishRow(&rows[0], 0, &c, nowUS, now); err != nil {
		return false, err
	}
	r, cs, err := s.foreignTx(ctx, tx)
	if err != nil {
		return false, fmt.Errorf("complete job %s: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT pronto_complete"); err != nil {
		return false, fmt.Errorf("complete job %s: %w", c.ID, err)
	}
	var out outbox
	applied, err := completeInTx(ctx, r, c, rows, nowUS, &out)
	if err != nil {
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO pronto_complete"); rbErr != nil {
			err = errors.Join(err, rbErr)
		}
	}
	if _, relErr := tx.ExecContext(ctx, "RELEASE pronto_complete"); relErr != nil {
		err = errors.Join(err, relErr)
	}
	if err != nil {
		return false, fmt.Errorf("complete job %s: %w", c.ID, err)
	}
	s.announceOnCommit(cs, &out)
	return applied, nil
}

// completeInTx is the body of CompleteSQLTx, inside its savepoint.
func completeInTx(ctx context.Context, r txRunner, c store.Completion, rows []finishRow, nowUS int64, out *outbox) (bool, error) {
	results := []store.FinishResult{{ID: c.ID}}
	if c.Remove && c.State == store.StateCompleted {
		// As FinishJobs does: a removable job is deleted, in the application's transaction here,
		// and one that must be kept (a workflow's, a unique key's holder) is completed below.
		left, err := removeFinishedBy(ctx, func(arg string) (*sql.Rows, error) {
			return r.QueryContext(ctx, removeFinishedSQL, arg)
		}, []store.Completion{c}, rows, results, out)
		if err != nil {
			return false, err
		}
		if len(left) == 0 {
			return results[0].Applied, nil
		}
	}
	done, err := retryLapsed(ctx, r, nowUS, func() (map[string]finished, error) {
		res, err := r.QueryContext(ctx, finishQuery(1, false), finishChunkArgs(rows, nowUS)...)
		if err != nil {
			return nil, err
		}
		return readFinished(res, 1)
	})
	if err != nil {
		return false, err
	}
	noteFinished(rows, done, results, out)
	if f, ok := done[c.ID]; ok && f.workflowID.Valid && f.state.Terminal() {
		if err := settleChildren(ctx, r, []string{c.ID}, nowUS, out); err != nil {
			return false, err
		}
	}
	return results[0].Applied, nil
}
