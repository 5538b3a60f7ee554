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

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/store"
)

// insertChunk is the most rows one multi-row INSERT writes (64 × 19 values, well under SQLite's limit
// of 32766 bound values).
const insertChunk = 64

// defaultMaintenanceLimit bounds Rescue, Promote, DiscardExpired and Cleanup when the caller gives no
// positive limit.
const defaultMaintenanceLimit = 1000

// insertRow is one job's values for insertJobSQL, and the Job it becomes.
type insertRow struct {
	args [insertJobArgs]any
	job  *store.Job
}

// prepareInsert validates params and computes the rows and the jobs Insert returns.
func prepareInsert(params []*store.InsertParams, nowUS int64, now time.Time) ([]insertRow, error) {
	rows := make([]insertRow, len(params))
	for i, p := range params {
		if p == nil {
			return nil, fmt.Errorf("insert job %d: nil params", i)
		}
		if p.ID == "" {
			return nil, fmt.Errorf("insert job %d: empty id", i)
		}
		if p.Kind == "" {
			return nil, fmt.Errorf("insert job %s: empty kind", p.ID)
		}
		if p.Queue == "" {
			return nil, fmt.Errorf("insert job %s: empty queue", p.ID)
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
		var expires time.Time
		if !p.ExpiresAt.IsZero() {
			expires = microTime(p.ExpiresAt.UnixMicro())
		}
		r := &rows[i]
		r.args = [insertJobArgs]any{
			p.ID, p.Kind, p.Queue, string(args), nullJSON(p.Meta), int64(p.Priority), string(state),
			int64(p.MaxAttempts), tags, nullJSON(p.RetryPolicy), p.Timeout.Milliseconds(), nowUS, schedUS,
			micro(expires), nullString(p.UniqueKey), nullString(p.Tenant), nullString(p.RateKey),
			nullString(p.WorkflowID), parents,
		}
		r.job = &store.Job{
			ID: p.ID, Kind: p.Kind, Queue: p.Queue, Args: args, Meta: p.Meta, Priority: p.Priority,
			State: state, MaxAttempts: p.MaxAttempts, RetryPolicy: p.RetryPolicy, Timeout: p.Timeout,
			Tags: p.Tags, CreatedAt: now, ScheduledAt: sched, ExpiresAt: expires, UniqueKey: p.UniqueKey,
			Tenant: p.Tenant, RateKey: p.RateKey, WorkflowID: p.WorkflowID, ParentIDs: p.ParentIDs,
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

// insertNotifications returns one NotifyInsert per queue among jobs, pending jobs excepted: DueAt is
// zero when any of the queue's jobs is due now, else the earliest due time.
func insertNotifications(jobs []*store.Job, nowUS int64) []store.Notification {
	var out []store.Notification
	idx := map[string]int{}
	for _, j := range jobs {
		if j.State == store.StatePending {
			continue
		}
		var due time.Time
		if j.State == store.StateScheduled && j.ScheduledAt.UnixMicro() > nowUS {
			due = j.ScheduledAt
		}
		i, ok := idx[j.Queue]
		if !ok {
			idx[j.Queue] = len(out)
			out = append(out, store.Notification{Kind: store.NotifyInsert, Queue: j.Queue, DueAt: due})
			continue
		}
		n := &out[i]
		if !n.DueAt.IsZero() && (due.IsZero() || due.Before(n.DueAt)) {
			n.DueAt = due
		}
	}
	return out
}

func (s *Store) publish(ns []store.Notification) {
	for _, n := range ns {
		s.hub.Publish(n)
	}
}

// mapInsertErr turns a primary-key violation into ErrDuplicate.
func mapInsertErr(err error) error {
	if sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
		return fmt.Errorf("insert jobs: %w: %v", store.ErrDuplicate, err)
	}
	return fmt.Errorf("insert jobs: %w", err)
}

// execer is what insertRows needs from a *sql.Tx or *sql.DB.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Insert writes the jobs atomically and then announces them, once per queue. Up to 64 jobs take one
// statement (its own transaction); more take one transaction of 64-row statements. A duplicate id fails
// the whole batch with store.ErrDuplicate.
func (s *Store) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if len(params) == 0 {
		return nil, nil
	}
	nowUS, now := s.nowMicro()
	rows, err := prepareInsert(params, nowUS, now)
	if err != nil {
		return nil, err
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

// insertPieces splits n rows into statement sizes: full chunks of insertChunk, then the remainder as
// powers of two, so that at most seven distinct INSERT statements are ever prepared.
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

// insertRows writes rows with this store's prepared statements: in one statement when one suffices,
// else in one write transaction.
func (s *Store) insertRows(ctx context.Context, rows []insertRow) error {
	pieces := insertPieces(len(rows))
	// Prepare first: while tx is open it holds the only writer connection.
	stmts := make([]*sql.Stmt, len(pieces))
	for i, n := range pieces {
		st, err := s.stmt(ctx, insertJobsSQL(n))
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
// with store.ErrDuplicate and leaves tx as it was. The jobs become visible when tx commits.
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
	rows, err := prepareInsert(params, nowUS, now)
	if err != nil {
		return nil, err
	}
	// Which connection is tx on? Connections this package opened carry a number in temp.user_version.
	var connID int64
	if err := tx.QueryRowContext(ctx, "PRAGMA temp.user_version").Scan(&connID); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT pronto_insert"); err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if err := insertRowsTx(ctx, tx, rows); err != nil {
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
	jobs := make([]*store.Job, len(rows))
	for i := range rows {
		jobs[i] = rows[i].job
	}
	ns := insertNotifications(jobs, nowUS)
	if cs := lookupConn(connID); connID != 0 && cs != nil {
		cs.mu.Lock()
		cs.pending = append(cs.pending, ns...)
		cs.mu.Unlock()
	} else {
		s.publish(ns)
	}
	return jobs, nil
}

// insertRowsTx writes rows with plain statements (tx may belong to another *sql.DB, where this
// store's prepared statements cannot be used).
func insertRowsTx(ctx context.Context, ex execer, rows []insertRow) error {
	args := make([]any, 0, min(len(rows), insertChunk)*insertJobArgs)
	for _, n := range insertPieces(len(rows)) {
		args = args[:0]
		for k := range n {
			args = append(args, rows[k].args[:]...)
		}
		rows = rows[n:]
		if _, err := ex.ExecContext(ctx, insertJobsSQL(n), args...); err != nil {
			return mapInsertErr(err)
		}
	}
	return nil
}

// maxClaimKinds is the largest kinds filter given its own prepared statement; Claim with more kinds
// fails (pronto clients register far fewer).
const maxClaimKinds = 500

// Claim moves up to p.Limit claimable jobs of p.Queue to active in one write transaction (one UPDATE
// ... RETURNING statement) and returns them in claim order: priority descending, then due time, then
// id. SQLite admits one writer at a time, across processes too, so no job is claimed twice.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	if len(p.Kinds) > maxClaimKinds {
		return nil, fmt.Errorf("claim jobs from queue %q: %d kinds is more than %d", p.Queue, len(p.Kinds), maxClaimKinds)
	}
	st, err := s.stmt(ctx, claimSQL(len(p.Kinds)))
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	nowUS, _ := s.nowMicro()
	args := make([]any, 5, 5+len(p.Kinds))
	args[0] = nowUS
	args[1] = nowUS + p.LeaseDuration.Microseconds()
	args[2] = p.WorkerID
	args[3] = p.Queue
	args[4] = int64(p.Limit)
	for _, k := range p.Kinds {
		args = append(args, k)
	}
	// One statement is its own transaction: no BEGIN/COMMIT round trips needed.
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	jobs, err := scanJobs(rows, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim jobs from queue %q: %w", p.Queue, err)
	}
	slices.SortFunc(jobs, func(a, b *store.Job) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := a.ScheduledAt.Compare(b.ScheduledAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return jobs, nil
}

// finishChunk is the most completions one finishBatchSQL statement applies. Smaller batches use the
// statement for the next power of two, padded with NULL rows, so at most eight are ever prepared.
const finishChunk = 128

// finishRow is one completion's values for finishBatchSQL.
type finishRow struct {
	idx      int // index in the completions
	args     [finishBatchArgs]any
	announce bool
	due      int64 // for announced jobs: due time, 0 for now
}

// Finish applies the completions in one write transaction, each guarded by state = 'active' and the
// completion's attempt, up to 128 per statement (a batch of up to 128 is one statement, which is its
// own transaction), and then announces the queues where jobs became
// claimable or due. A batch naming one job twice applies the first and then the second (which finds
// the job no longer active unless the first left it so).
func (s *Store) Finish(ctx context.Context, completions []store.Completion) ([]store.FinishResult, error) {
	if len(completions) == 0 {
		return nil, nil
	}
	nowUS, now := s.nowMicro()
	results := make([]store.FinishResult, len(completions))
	rows := make([]finishRow, len(completions))
	for i := range completions {
		c := &completions[i]
		results[i].ID = c.ID
		r := &rows[i]
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
			return nil, fmt.Errorf("finish job %s: state %q is not a completion state", c.ID, c.State)
		}
		if c.Error != nil {
			e := *c.Error
			if e.At.IsZero() {
				e.At = now
			}
			b, err := json.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("finish job %s: encode error: %w", c.ID, err)
			}
			errEntry = string(b)
		}
		r.args = [finishBatchArgs]any{c.ID, int64(c.Attempt), string(c.State), sched, completed, result, errEntry, refund}
	}

	// Split into rounds in which every id appears once: a statement cannot apply two completions to one
	// row. Nearly always there is one round.
	rounds := [][]finishRow{rows}
	if hasDuplicateIDs(completions) {
		rounds = splitDuplicateRounds(rows, completions)
	}

	// Prepare every statement first: while tx is open it holds the only writer connection.
	type chunkPlan struct {
		rows []finishRow
		st   *sql.Stmt
		size int
	}
	plans := make([][]chunkPlan, len(rounds))
	for i, round := range rounds {
		for chunk := range slices.Chunk(round, finishChunk) {
			size := 1
			for size < len(chunk) {
				size *= 2
			}
			st, err := s.stmt(ctx, finishBatchSQL(size))
			if err != nil {
				return nil, fmt.Errorf("finish jobs: %w", err)
			}
			plans[i] = append(plans[i], chunkPlan{chunk, st, size})
		}
	}

	// One statement is its own transaction; several need an explicit one.
	var tx *sql.Tx
	if len(plans) > 1 || len(plans[0]) > 1 {
		var err error
		if tx, err = s.w.BeginTx(ctx, nil); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	}

	applied := make(map[string]string, len(completions)) // id -> queue, within one round
	args := make([]any, 0, finishChunk*finishBatchArgs)
	var wakes []finishRow
	var queues []string
	for ri, round := range rounds {
		clear(applied)
		for _, plan := range plans[ri] {
			chunk, st, size := plan.rows, plan.st, plan.size
			args = args[:0]
			for i := range chunk {
				args = append(args, chunk[i].args[:]...)
			}
			for range (size - len(chunk)) * finishBatchArgs {
				args = append(args, nil)
			}
			if tx != nil {
				st = tx.StmtContext(ctx, st)
			}
			res, err := st.QueryContext(ctx, args...)
			if err != nil {
				return nil, fmt.Errorf("finish jobs: %w", err)
			}
			for res.Next() {
				var id, queue string
				if err := res.Scan(&id, &queue); err != nil {
					res.Close()
					return nil, fmt.Errorf("finish jobs: %w", err)
				}
				applied[id] = queue
			}
			if err := res.Err(); err != nil {
				return nil, fmt.Errorf("finish jobs: %w", err)
			}
			if err := res.Close(); err != nil {
				return nil, fmt.Errorf("finish jobs: %w", err)
			}
		}
		for _, r := range round {
			queue, ok := applied[completions[r.idx].ID]
			if !ok {
				continue
			}
			results[r.idx].Applied = true
			if r.announce {
				wakes = append(wakes, r)
				queues = append(queues, queue)
			}
		}
	}
	if tx != nil {
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("finish jobs: commit: %w", err)
		}
	}
	if len(wakes) > 0 {
		var ns []store.Notification
		idx := map[string]int{}
		for k, w := range wakes {
			var dueAt time.Time
			if w.due != 0 {
				dueAt = microTime(w.due)
			}
			q := queues[k]
			i, ok := idx[q]
			if !ok {
				idx[q] = len(ns)
				ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q, DueAt: dueAt})
				continue
			}
			n := &ns[i]
			if !n.DueAt.IsZero() && (dueAt.IsZero() || dueAt.Before(n.DueAt)) {
				n.DueAt = dueAt
			}
		}
		s.publish(ns)
	}
	return results, nil
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
	args := make([]any, 0, 2+heartbeatChunk)
	for i, c := range chunks {
		args = append(args[:0], expiry, p.WorkerID)
		for _, id := range c {
			args = append(args, id)
		}
		for range sizes[i] - len(c) {
			args = append(args, nil)
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
// spent. The queues it made claimable are announced.
func (s *Store) Rescue(ctx context.Context, p store.RescueParams) (store.RescueResult, error) {
	var res store.RescueResult
	limit := p.Limit
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	st, err := s.stmt(ctx, rescueSQL)
	if err != nil {
		return res, fmt.Errorf("rescue jobs: %w", err)
	}
	nowUS, now := s.nowMicro()
	rows, err := st.QueryContext(ctx, nowUS, now.Format(time.RFC3339Nano), int64(limit))
	if err != nil {
		return res, fmt.Errorf("rescue jobs: %w", err)
	}
	jobs, err := scanJobs(rows, 0)
	if err != nil {
		return res, fmt.Errorf("rescue jobs: %w", err)
	}
	slices.SortFunc(jobs, func(a, b *store.Job) int { return cmp.Compare(a.ID, b.ID) })
	seen := map[string]bool{}
	var ns []store.Notification
	for _, j := range jobs {
		if j.State == store.StateDiscarded {
			res.Discarded = append(res.Discarded, j)
			continue
		}
		res.Requeued = append(res.Requeued, j)
		if !seen[j.Queue] {
			seen[j.Queue] = true
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
		}
	}
	s.publish(ns)
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
	rows, err := st.QueryContext(ctx, nowUS, int64(limit))
	if err != nil {
		return 0, fmt.Errorf("promote jobs: %w", err)
	}
	defer rows.Close()
	n := 0
	seen := map[string]bool{}
	var ns []store.Notification
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return 0, fmt.Errorf("promote jobs: %w", err)
		}
		n++
		if !seen[q] {
			seen[q] = true
			ns = append(ns, store.Notification{Kind: store.NotifyInsert, Queue: q})
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("promote jobs: %w", err)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("promote jobs: %w", err)
	}
	s.publish(ns)
	return n, nil
}

// DiscardExpired discards up to limit jobs not yet started (available, scheduled, retryable or
// pending) whose expiry has passed, each with an error entry of type "expired".
func (s *Store) DiscardExpired(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = defaultMaintenanceLimit
	}
	st, err := s.stmt(ctx, discardExpiredSQL)
	if err != nil {
		return 0, fmt.Errorf("discard expired jobs: %w", err)
	}
	nowUS, now := s.nowMicro()
	res, err := st.ExecContext(ctx, nowUS, now.Format(time.RFC3339Nano), int64(limit))
	if err != nil {
		return 0, fmt.Errorf("discard expired jobs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("discard expired jobs: %w", err)
	}
	return int(n), nil
}

// NextDue returns the earliest due time of the scheduled and retryable jobs of queue.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := s.r.QueryRowContext(ctx, nextDueSQL, queue).Scan(&v); err != nil {
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
			var state string
			var completedAt sql.NullInt64
			if err := rows.Scan(&rowid, &state, &completedAt, &createdAt); err != nil {
				rows.Close()
				return 0, fmt.Errorf("clean up jobs: %w", err)
			}
			n++
			cursor = rowid
			if createdAt >= stopAt {
				rows.Close()
				break walk
			}
			if completedAt.Valid && qualifies(state, completedAt.Int64) {
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
	st, err := s.stmt(ctx, cleanupDeleteSQL)
	if err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	res, err := st.ExecContext(ctx, string(ids), cutUS[0], cutUS[1], cutUS[2])
	if err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("clean up jobs: %w", err)
	}
	return int(n), nil
}
